"""Cluster name resolution: every node's ID resolves to its address through the hosts file.

The worker ``hostsfile`` (see ``worker_hostsfile``) keeps a managed block of
``<address> <node ID>`` lines in the hosts file from the core value ``cluster_nodes`` and
the node's own address; opt-in, it also sets the hostname to the node ID and writes the
node ID to a machine ID file. The plugin owns no values.

Configuration (``[plugins.hostsfile]`` in roleserve.toml): ``path``, ``hostname``,
``machine_id``; declared in ``settings``, where each is documented (``roleserve plugins``
lists them).
"""

from __future__ import annotations

from typing import Any

from roleserve_core import (
    CLUSTER_NODES,
    NETWORK,
    NODE_ID,
    NodeContext,
    Setting,
    Worker,
    hookimpl,
    lazy_runnable,
)
from roleserve_hostsfile.settings import SETTINGS, HostsfileSettings

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.hostsfile]`` accepts (see ``settings``)."""
    return list(SETTINGS)


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """The worker ``hostsfile``, always running (its module loads when it starts)."""
    settings = HostsfileSettings.of(node.config)
    return [
        Worker(
            "hostsfile",
            lazy_runnable("roleserve_hostsfile.worker_hostsfile:run", node, settings),
            reads=(CLUSTER_NODES, NETWORK, NODE_ID),
            doc="Keeps the hosts file's block of node addresses.",
        )
    ]
