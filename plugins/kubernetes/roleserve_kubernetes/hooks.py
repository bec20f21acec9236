"""Kubernetes controller and worker launcher.

The worker ``kubernetes_controller`` (``worker_controller``) runs kube-apiserver,
kube-controller-manager and kube-scheduler on nodes with the ``kubernetes_controller``
role and a local control plane, and sets ``kubernetes_status``. On nodes with the
``kubernetes_worker`` role, the worker ``kubernetes_worker`` (``worker_kubernetes_worker``)
runs containerd with CRI, a sandbox image it builds itself and the CNI bridge of the
node's pod network, which it owns as ``pod_network``; the worker ``kubernetes_kubelet``
(``worker_kubelet``) runs the kubelet against that containerd. A kube binary the node
lacks is a note on its runnable, not a failure.

It contributes the exporter ``containerd`` to the metrics plugin, on worker nodes.

Configuration (``[plugins.kubernetes]`` in roleserve.toml): ``kube_apiserver``,
``kube_controller_manager``, ``kube_scheduler``, ``kubelet`` (paths of the binaries; empty:
on PATH; declared in ``binaries``); ``containerd``, ``ctr``, ``containerd_metrics_port``,
``busybox``, ``cni_bin_dir``, ``snapshotter`` (declared in ``settings``).
"""

from __future__ import annotations

from typing import Any

from roleserve_core import ROLES, NodeContext, Setting, ValueKey, Worker, hookimpl
from roleserve_kubernetes import binaries
from roleserve_kubernetes.containerd import metrics_address
from roleserve_kubernetes.settings import SETTINGS, WorkerSettings
from roleserve_kubernetes.values import KUBERNETES_STATUS, POD_NETWORK
from roleserve_kubernetes.worker_controller import controller_worker
from roleserve_kubernetes.worker_kubelet import kubelet_worker
from roleserve_kubernetes.worker_kubernetes_worker import has_worker_role, kubernetes_worker

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The keys this plugin owns."""
    return [KUBERNETES_STATUS, POD_NETWORK]


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.kubernetes]`` accepts: the kube binaries' paths (``binaries``) and
    the container runtime's settings (``settings``)."""
    return [*binaries.SETTINGS, *SETTINGS]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """The controller worker, always running (its note says what it waits for); on nodes
    with the ``kubernetes_worker`` role, the container runtime's and the kubelet's."""
    return [
        controller_worker(node),
        kubernetes_worker(node, WorkerSettings.of(node.config)),
        kubelet_worker(node),
    ]


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


@hookimpl(optionalhook=True)
def roleserve_curator_services(node: NodeContext) -> list[Any]:
    """``KubernetesCertificates`` on the leading curator: kubelet and admin certificates
    from the Kubernetes CA (``service``). The controlplane plugin defines the hook."""
    from roleserve_kubernetes.service import curator_extension

    return [curator_extension()]
