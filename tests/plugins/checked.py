"""A test plugin whose settings allow only some values of their types, and that checks two
of them against each other in ``roleserve_workers`` (what a ``Setting`` cannot say)."""

from __future__ import annotations

import os
from typing import Any

import anyio

from roleserve_core import ConfigError, NodeContext, RunContext, Setting, Worker, hookimpl

ROLESERVE_PLUGIN_API = 1

PORT: Setting[int] = Setting("port", int, 7000, "The port it listens on.", minimum=1, maximum=65535)
MODE: Setting[str] = Setting("mode", str, "fast", "How it works.", choices=("fast", "safe"))
SPOOL: Setting[str] = Setting(
    "spool",
    str,
    "/var/spool/checked",
    "Where it queues.",
    predicate=os.path.isabs,
    requirement="an absolute path",
)
RATIO: Setting[float] = Setting("ratio", float, 0.5, "A share.", minimum=0, maximum=1)
LOW: Setting[int] = Setting("low", int, 1, "The lower mark.", minimum=0)
HIGH: Setting[int] = Setting("high", int, 2, "The higher mark.")


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """Settings with allowed values."""
    return [PORT, MODE, SPOOL, RATIO, LOW, HIGH]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """One idle worker, once ``low`` is at most ``high``."""
    low, high = LOW.read(node.config), HIGH.read(node.config)
    if low > high:
        raise ConfigError(f"[plugins.checked] low ({low}) must not be above high ({high})")

    async def checked(ctx: RunContext) -> None:
        """Idles."""
        ctx.signal_healthy()
        await anyio.sleep_forever()

    return [Worker("checked", checked)]
