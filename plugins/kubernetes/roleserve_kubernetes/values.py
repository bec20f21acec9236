"""The values the plugin owns: ``kubernetes_status`` and ``pod_network``.

Declared by the core until this plugin owned them (``roleserve_core.values`` under plugin
API 1, whose old names still answer, with a warning naming this place). Other plugins read
them through this plugin's declared API (``from roleserve_kubernetes import POD_NETWORK``):
clusternet announces ``pod_network`` over the cluster mesh, if this plugin is installed.
Their names are the ones the core chose for all plugins, kept as they were, so they need
not begin with the plugin's name (``roleserve_core.values.MOVED_KEY_NAMES``).

    key                  type                set by                           read by
    kubernetes_status    KubernetesStatus    the controller worker            the kubelet
    pod_network          PodNetwork          the worker role's pod_network    clusternet,
                                                                              the kubelet
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import ClassVar

from roleserve_core import ValueKey

__all__ = ["KUBERNETES_STATUS", "POD_NETWORK", "KubernetesStatus", "PodNetwork"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class KubernetesStatus:
    """Kubernetes' control plane on this node, as the kubernetes plugin's controller runs it.

    Set by the controller worker once it started the components, again when the apiserver
    turns ready or stops being ready, and reset to ``KubernetesStatus.NONE`` ("nothing
    runs") whenever the worker stops: Monogon never resets its status, so a node that lost
    the controller role went on saying it ran one. Values cannot be unset, so "nothing" is
    a value of its own, as with ``LocalControlPlane.NONE``.
    """

    apiserver: str | None = None
    """The local kube-apiserver's URL, ``https://<node address>:6443``; None: no apiserver
    runs here (no controller, or no kube-apiserver binary)."""
    ca_pem: bytes | None = None
    """The cluster's Kubernetes CA (PEM): it signed the apiserver's serving certificate and
    every client certificate the apiserver admits."""
    apiserver_ready: bool = False
    """Whether the local apiserver answers ``/readyz`` with 200."""
    running: tuple[str, ...] = ()
    """The components started here (``kube-apiserver``, ``kube-controller-manager``,
    ``kube-scheduler``); each one's own state is its runnable's, in ``roleserve ctl tree``."""
    absent: tuple[str, ...] = ()
    """The components this node has no binary for (configured or on PATH)."""

    @property
    def controller_running(self) -> bool:
        """Whether the controller worker started Kubernetes' control plane here (with the
        binaries it found: ``running`` and ``absent`` say which)."""
        return bool(self.running or self.absent)

    def __repr__(self) -> str:
        """One short line: the CA's PEM would drown the rest (``roleserve ctl values``)."""
        if self == KubernetesStatus.NONE:
            return "KubernetesStatus(NONE)"
        return (
            f"KubernetesStatus(apiserver={self.apiserver!r}, ready={self.apiserver_ready}, "
            f"running={self.running!r}, absent={self.absent!r})"
        )

    NONE: ClassVar[KubernetesStatus]


KubernetesStatus.NONE = KubernetesStatus()


@dataclass(frozen=True, slots=True)
class PodNetwork:
    """The pod prefixes Kubernetes assigned to this node, to announce over the cluster mesh."""

    prefixes: tuple[IPNetwork, ...]


KUBERNETES_STATUS: ValueKey[KubernetesStatus] = ValueKey(
    "kubernetes_status",
    KubernetesStatus,
    "Kubernetes' control plane here: apiserver URL and readiness, CA, components running "
    "and absent; NONE when no controller runs (owned by kubernetes).",
)
POD_NETWORK: ValueKey[PodNetwork] = ValueKey(
    "pod_network", PodNetwork, "Pod prefixes assigned to this node (owned by kubernetes)."
)
