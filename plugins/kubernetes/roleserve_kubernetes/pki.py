"""The Kubernetes PKI: the certificates and keys of one cluster's Kubernetes, kept in etcd.

CONTRACT (filled in by the PKI work; the launch plans are written against it)::

    /kubernetes/pki/<name>   in etcd, one key per entry of PKI_NAMES, created once by the
                             first controller (create_revision == 0), read by every later one

    ca                       the cluster's Kubernetes CA (signs everything below but the
                             front-proxy client and the service-account pair)
    front-proxy-ca           the CA of the aggregation layer's front proxy
    front-proxy-client       client certificate of the apiserver to aggregated servers
    service-account          key pair signing service-account tokens (no certificate)
    apiserver                serving certificate of kube-apiserver
    apiserver-kubelet-client client certificate of kube-apiserver to kubelets
    controller-manager       client certificate of kube-controller-manager
    scheduler                client certificate of kube-scheduler
    admin                    client certificate of the cluster's admin (O=system:masters)

Per-node certificates (a kubelet's client and serving certificate) are not here: the
curator issues them from ``ca`` to the node that asks.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PKI_NAMES", "PKI_PREFIX", "KeyPair"]

PKI_PREFIX = "/kubernetes/pki/"
"""The etcd prefix of the PKI's entries."""

PKI_NAMES = (
    "ca",
    "front-proxy-ca",
    "front-proxy-client",
    "service-account",
    "apiserver",
    "apiserver-kubelet-client",
    "controller-manager",
    "scheduler",
    "admin",
)
"""Every entry of the PKI, in the order they are made."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """One entry of the PKI: a private key and, except for ``service-account``, its
    certificate; both PEM."""

    key_pem: bytes
    certificate_pem: bytes | None
