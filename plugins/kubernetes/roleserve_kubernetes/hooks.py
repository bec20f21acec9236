"""Kubernetes controller and worker launcher: no workers yet.

It will start the Kubernetes control plane on nodes with the
``kubernetes_controller`` role and the node services on nodes with ``kubernetes_worker``,
and own ``kubernetes_status`` and ``pod_network``. Until then it owns those keys and runs
nothing: the values stay unset.
"""

from __future__ import annotations

from typing import Any

from roleserve_core import NodeContext, hookimpl
from roleserve_core.keys import KUBERNETES_STATUS, POD_NETWORK
from roleserve_core.values import ValueKey

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The keys this plugin owns."""
    return [KUBERNETES_STATUS, POD_NETWORK]


@hookimpl(optionalhook=True)
def roleserve_curator_services(node: NodeContext) -> list[Any]:
    """``KubernetesCertificates`` on the leading curator: kubelet and admin certificates
    from the Kubernetes CA (``service``). The controlplane plugin defines the hook."""
    from roleserve_kubernetes.service import curator_extension

    return [curator_extension()]
