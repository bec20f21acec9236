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

from roleserve_core import (
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    LOCAL_CONTROL_PLANE,
    NETWORK,
    NODE_ID,
    ROLES,
    NodeContext,
    NodeRoles,
    Setting,
    ValueKey,
    Worker,
    hookimpl,
    lazy_runnable,
)
from roleserve_kubernetes import binaries
from roleserve_kubernetes.settings import SETTINGS, WorkerSettings, metrics_address
from roleserve_kubernetes.values import KUBERNETES_STATUS, POD_NETWORK

ROLESERVE_PLUGIN_API = 1


def has_worker_role(roles: NodeRoles) -> bool:
    """The gate of the workers ``kubernetes_worker`` and ``kubernetes_kubelet``: the node
    holds the ``kubernetes_worker`` role."""
    return roles.kubernetes_worker is not None


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


# The workers, each named with lazy_runnable: a worker's module (containerd, the kubelet,
# the apiserver's plans, etcd's client) loads when it starts, so a node without the
# kubernetes_worker role never loads the worker's. The options go to the worker's run
# (tests pass stand-ins: a PKI, a network namespace, certificates).


def controller_worker(node: NodeContext, **options: Any) -> Worker:
    """``kubernetes_controller``: ``worker_controller.run``, always running (its note says
    what it waits for)."""
    return Worker(
        "kubernetes_controller",
        lazy_runnable("roleserve_kubernetes.worker_controller:run", node, **options),
        reads=(ROLES, LOCAL_CONTROL_PLANE, NETWORK, NODE_ID, CLUSTER_NODES),
        doc="Runs kube-apiserver, kube-controller-manager and kube-scheduler on controllers.",
    )


def kubernetes_worker(node: NodeContext, settings: WorkerSettings, **options: Any) -> Worker:
    """``kubernetes_worker``: ``worker_kubernetes_worker.run``, on worker nodes."""
    return Worker(
        "kubernetes_worker",
        lazy_runnable(
            "roleserve_kubernetes.worker_kubernetes_worker:run", node, settings, **options
        ),
        when=has_worker_role,
        reads=(NODE_ID, CLUSTER_NODES, NETWORK, POD_NETWORK),
        doc="Runs containerd and keeps the pod network of this Kubernetes worker node.",
    )


def kubelet_worker(node: NodeContext, **options: Any) -> Worker:
    """``kubernetes_kubelet``: ``worker_kubelet.run``, on worker nodes."""
    return Worker(
        "kubernetes_kubelet",
        lazy_runnable("roleserve_kubernetes.worker_kubelet:run", node, **options),
        when=has_worker_role,
        reads=(NODE_ID, NETWORK, POD_NETWORK, KUBERNETES_STATUS, CLUSTER_NODES, CURATOR_CONNECTION),
        doc="Runs the kubelet on nodes with the kubernetes_worker role.",
    )


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
