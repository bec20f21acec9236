"""A test plugin that declares a value, then raises in roleserve_workers."""

from typing import Any

from roleserve_core import NodeContext, ValueKey, Worker, hookimpl

ROLESERVE_PLUGIN_API = 1

STATE: ValueKey[str] = ValueKey("raising_workers_state", str, "Never set.")


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """Declared before roleserve_workers fails, then forgotten."""
    return [STATE]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """Fails, as a plugin with a bug would."""
    raise RuntimeError("workers are broken")
