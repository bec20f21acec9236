"""WireGuard cluster mesh: every node a peer of every other, over the cluster network.

The worker ``clusternet`` (see ``worker_clusternet``) keeps a WireGuard interface (named by
the setting ``interface``, ``clusternet`` by default; wireguard-go under the core's program
runner) whose peers are the other nodes of the cluster, from the core value
``cluster_nodes``; it announces this node's key and prefixes (its address in the prefix
the curator allocated it, and its pod prefixes) to the curator, and checks the whole
interface against what it wants every ``reconcile_interval``. It owns the value
``clusternet_status``.

Configuration (``[plugins.clusternet]`` in roleserve.toml): ``interface``,
``listen_port``, ``keepalive``, ``mtu``, ``cluster_network``, ``reconcile_interval``,
``wireguard_go``; declared in ``settings``, where each is documented (``roleserve
plugins`` lists them).
"""

from __future__ import annotations

from typing import Any

from roleserve_clusternet.settings import SETTINGS, ClusternetSettings
from roleserve_clusternet.values import CLUSTERNET_STATUS
from roleserve_clusternet.worker_clusternet import clusternet_worker
from roleserve_core import NodeContext, Setting, ValueKey, Worker, hookimpl

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.clusternet]`` accepts (see ``settings``)."""
    return list(SETTINGS)


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The plugin owns ``clusternet_status``."""
    return [CLUSTERNET_STATUS]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """The worker ``clusternet``, always running."""
    return [clusternet_worker(node, ClusternetSettings.of(node.config))]
