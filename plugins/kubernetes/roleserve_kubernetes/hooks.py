"""Kubernetes controller and worker launcher.

The worker ``kubernetes_controller`` (``worker_controller``) runs kube-apiserver,
kube-controller-manager and kube-scheduler on nodes with the ``kubernetes_controller``
role and a local control plane, and sets ``kubernetes_status``. The worker
``kubernetes_kubelet`` (``worker_kubelet``) runs the kubelet on nodes with the
``kubernetes_worker`` role. A kube binary the node lacks is a note on its runnable, not a
failure. The plugin also owns ``pod_network``.

Configuration (``[plugins.kubernetes]`` in roleserve.toml): ``kube_apiserver``,
``kube_controller_manager``, ``kube_scheduler``, ``kubelet`` (paths of the binaries; empty:
on PATH); declared in ``binaries``.
"""

from __future__ import annotations

from typing import Any

from roleserve_core import (
    KUBERNETES_STATUS,
    POD_NETWORK,
    NodeContext,
    Setting,
    ValueKey,
    Worker,
    hookimpl,
)
from roleserve_kubernetes import binaries
from roleserve_kubernetes.worker_controller import controller_worker
from roleserve_kubernetes.worker_kubelet import kubelet_worker

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The keys this plugin owns."""
    return [KUBERNETES_STATUS, POD_NETWORK]


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.kubernetes]`` accepts: the kube binaries' paths (``binaries``)."""
    return list(binaries.SETTINGS)


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """The controller worker, always running (its note says what it waits for), and the
    kubelet's, on nodes with the ``kubernetes_worker`` role."""
    return [controller_worker(node), kubelet_worker(node)]


@hookimpl(optionalhook=True)
def roleserve_curator_services(node: NodeContext) -> list[Any]:
    """``KubernetesCertificates`` on the leading curator: kubelet and admin certificates
    from the Kubernetes CA (``service``). The controlplane plugin defines the hook."""
    from roleserve_kubernetes.service import curator_extension

    return [curator_extension()]
