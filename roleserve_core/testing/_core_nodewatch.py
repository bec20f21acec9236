"""The built-in plugin ``core`` with its values and one worker, ``nodewatch``.

What ``PluginHarness(cluster_nodes=True)`` registers: a test of a worker that reads
``cluster_nodes`` needs the worker that keeps it, not the core's other workers (whose calls
to the fake curator would mix with the ones under test).
"""

from __future__ import annotations

from roleserve_core.hookspecs import hookimpl
from roleserve_core.keys import roleserve_values
from roleserve_core.node import NodeContext, Worker
from roleserve_core.workers.nodewatch import nodewatch_worker

__all__ = ["roleserve_values", "roleserve_workers"]

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """Only ``nodewatch``."""
    return [nodewatch_worker(node)]
