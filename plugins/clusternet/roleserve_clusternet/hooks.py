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

import anyio

from roleserve_clusternet.pods import pod_network_key
from roleserve_clusternet.settings import SETTINGS, ClusternetSettings
from roleserve_clusternet.values import CLUSTERNET_STATUS
from roleserve_core import (
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    NODE_ID,
    NodeContext,
    RunContext,
    Runnable,
    Setting,
    ValueKey,
    Worker,
    hookimpl,
    lazy_runnable,
)

ROLESERVE_PLUGIN_API = 1

OFF_NOTE = "off: {reason}"
"""The worker's note when ``[plugins.clusternet] off`` gives a reason."""


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


def clusternet_worker(node: NodeContext, settings: ClusternetSettings, **options: Any) -> Worker:
    """The worker ``clusternet``. Its module (netlink, UAPI, the curator's stubs) loads
    when it starts, and never while the setting ``off`` is set (a loopback local cluster).

    :param options: passed to ``worker_clusternet.run`` (tests: ``netns``, ``device``,
        ``children``).
    """
    if settings.off:
        return Worker("clusternet", _off(settings.off))
    reads: list[ValueKey[Any]] = [NODE_ID, CLUSTER_NODES, CURATOR_CONNECTION]
    if (pods := pod_network_key(node.values)) is not None:
        reads.append(pods)
    return Worker(
        "clusternet",
        lazy_runnable("roleserve_clusternet.worker_clusternet:run", node, settings, **options),
        reads=tuple(reads),
        doc="Keeps the WireGuard mesh interface and its peers.",
    )


def _off(reason: str) -> Runnable:
    async def clusternet(ctx: RunContext) -> None:
        """Keeps the mesh off on this node ([plugins.clusternet] off), saying why."""
        ctx.set_note(OFF_NOTE.format(reason=reason))
        await anyio.sleep_forever()

    return clusternet
