"""A test plugin whose worker's name has a dash, which a DN cannot hold."""

from roleserve_core import NodeContext, RunContext, Worker, hookimpl

ROLESERVE_PLUGIN_API = 1


async def run(ctx: RunContext) -> None:
    """Never runs: its name is refused first."""


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """One worker, named as a DN cannot be."""
    return [Worker("dash-worker", run)]
