"""A test plugin with one setting of every kind, and a worker that reads them.

Values: owns ``configurable_settings``, which its worker sets to its ``NodeContext.config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import anyio

from roleserve_core import NodeContext, RunContext, Setting, ValueKey, Worker, hookimpl

ROLESERVE_PLUGIN_API = 1

GREETING: Setting[str] = Setting("greeting", str, "hello", "What the worker says.")
TIMES: Setting[int] = Setting("times", int, 1, "How often it says it.")
PAUSE: Setting[float] = Setting("pause", float, 0.5, "Seconds between greetings.")
LOUD: Setting[bool] = Setting("loud", bool, False, "Whether it shouts.")
NAMES: Setting[list[str]] = Setting("names", list[str], [], "Whom it greets.")
LOG_FILE: Setting[str | None] = Setting("log_file", str, None, "Where it logs; unset: nowhere.")

SETTINGS: list[Setting[Any]] = [GREETING, TIMES, PAUSE, LOUD, NAMES, LOG_FILE]

SEEN: ValueKey[Mapping[str, Any]] = ValueKey(
    "configurable_settings",
    MappingProxyType,
    "The NodeContext.config the worker ran with (the core makes it read-only).",
)


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """One setting of every kind."""
    return SETTINGS


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The value the worker sets."""
    return [SEEN]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """A worker that publishes the settings it was given."""

    async def configurable(ctx: RunContext) -> None:
        """Publishes its settings, then idles."""
        node.values.set(SEEN, node.config)
        ctx.signal_healthy()
        await anyio.sleep_forever()

    return [Worker("configurable", configurable)]
