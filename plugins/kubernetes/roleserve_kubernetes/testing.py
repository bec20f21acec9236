"""Test helpers of the kubernetes plugin: a PKI of the contract's kind, made in memory.

The real PKI lives in etcd (``pki``); tests of the launch plans, the probes and the
runnables need certificates of the same shape without etcd: ``throwaway_pki`` makes every
``PKI_NAMES`` entry, the apiserver's serving certificate naming ``addresses``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from roleserve_core.identity import (
    certificate_to_pem,
    create_ca,
    generate_key,
    issue_certificate,
    private_key_to_pem,
)
from roleserve_kubernetes.pki import KeyPair

__all__ = ["throwaway_pki"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CLIENTS = {
    "front-proxy-client": ("front-proxy-ca", "front-proxy-client"),
    "apiserver-kubelet-client": ("ca", "kube-apiserver-kubelet-client"),
    "controller-manager": ("ca", "system:kube-controller-manager"),
    "scheduler": ("ca", "system:kube-scheduler"),
    "admin": ("ca", "admin"),
}


def throwaway_pki(addresses: Sequence[IPAddress] = ()) -> dict[str, KeyPair]:
    """Every entry of ``PKI_NAMES``, freshly made; ``apiserver`` serves ``addresses``."""
    keys = {name: generate_key() for name in ("ca", "front-proxy-ca")}
    cas = {name: create_ca(key) for name, key in keys.items()}
    pki = {
        name: KeyPair(private_key_to_pem(keys[name]), certificate_to_pem(cas[name])) for name in cas
    }
    for name, (ca, common_name) in _CLIENTS.items():
        key = generate_key()
        certificate = issue_certificate(keys[ca], cas[ca], key.public_key(), common_name)
        pki[name] = KeyPair(private_key_to_pem(key), certificate_to_pem(certificate))
    key = generate_key()
    serving = issue_certificate(
        keys["ca"],
        cas["ca"],
        key.public_key(),
        "kube-apiserver",
        server=True,
        dns_names=("kubernetes", "kubernetes.default.svc.cluster.local"),
        ip_addresses=tuple(addresses),
    )
    pki["apiserver"] = KeyPair(private_key_to_pem(key), certificate_to_pem(serving))
    pki["service-account"] = KeyPair(private_key_to_pem(generate_key()), None)
    return pki
