"""A test plugin whose hook implementation asks for an argument the hook does not have."""

from roleserve_core import NodeContext, Worker, hookimpl

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_workers(node: NodeContext, cluster: str) -> list[Worker]:
    """``cluster`` is no argument of roleserve_workers."""
    return []
