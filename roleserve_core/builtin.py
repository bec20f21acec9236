"""The built-in plugin core: the node's shared values and its own workers.

It is registered like any plugin, through the same hooks, so ``roleserve plugins`` lists
its workers and values, and a worker of the core fails, restarts and reports exactly as a
plugin's does. It is essential: it cannot be disabled.

::

    roleserve_values    node_id, node_credentials, bootstrap, roles, curator_connection,
                        network, handled_custom_roles, cluster_nodes (declared in ``keys``)
    roleserve_workers   rolefetch, statuspush, heartbeat, nodemgmt, nodewatch (``workers``)
"""

from __future__ import annotations

from roleserve_core.hookspecs import hookimpl
from roleserve_core.keys import roleserve_values
from roleserve_core.node import NodeContext, Worker
from roleserve_core.workers import core_workers

__all__ = ["roleserve_values", "roleserve_workers"]

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """The node's own workers."""
    return core_workers(node)
