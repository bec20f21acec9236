"""Kubernetes controller and worker launcher.

On nodes with ``kubernetes_worker`` the worker ``kubernetes_worker`` runs containerd with
CRI, a sandbox image it builds itself, and the CNI bridge of the node's pod network (see
``worker_kubernetes_worker``); it owns ``pod_network``. The control plane on
``kubernetes_controller`` nodes, the kubelet, and ``kubernetes_status`` come with the
Kubernetes PKI and launch plans; until then ``kubernetes_status`` stays unset.

It contributes the exporter ``containerd`` to the metrics plugin, on worker nodes.

Configuration (``[plugins.kubernetes]`` in roleserve.toml): ``containerd``, ``ctr``,
``containerd_metrics_port``, ``busybox``, ``cni_bin_dir``, ``snapshotter``; declared in
``settings``, where each is documented (``roleserve plugins`` lists them).
"""

from __future__ import annotations

from typing import Any

from roleserve_core import NodeContext, Setting, Worker, hookimpl
from roleserve_core.keys import KUBERNETES_STATUS, POD_NETWORK, ROLES
from roleserve_core.values import ValueKey
from roleserve_kubernetes.containerd import metrics_address
from roleserve_kubernetes.settings import SETTINGS, WorkerSettings
from roleserve_kubernetes.worker_kubernetes_worker import has_worker_role, kubernetes_worker

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The keys this plugin owns."""
    return [KUBERNETES_STATUS, POD_NETWORK]


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.kubernetes]`` accepts (see ``settings``)."""
    return list(SETTINGS)


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """``kubernetes_worker``, on nodes with that role."""
    return [kubernetes_worker(node, WorkerSettings.of(node.config))]


@hookimpl(optionalhook=True)
def roleserve_metrics_exporters(node: NodeContext) -> list[tuple[str, str]]:
    """``containerd``: containerd's own metrics (``/v1/metrics``), on worker nodes, for
    the metrics plugin to serve at ``/metrics/containerd``.

    The metrics plugin defines the hook; this plugin implements it without importing that
    one (an optional hook: quiet when the metrics plugin is not installed). It is asked
    again whenever the roles change.
    """
    roles = node.values.read(ROLES)
    if not roles.statistics().is_set or not has_worker_role(roles.get_nowait()):
        return []
    address = metrics_address(node.values, WorkerSettings.of(node.config))
    return [] if address is None else [("containerd", f"http://{address}/v1/metrics")]
