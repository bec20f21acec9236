"""A kubeconfig: how a Kubernetes client (a controller, the kubelet, kubectl) reaches the
apiserver and who it is there.

Written as JSON: JSON is YAML, which every Kubernetes client reads (client-go's loader and
kubectl parse it), and it needs no YAML library. The certificates and the key are embedded
(``*-data``, base64), so that one file, mode 0600 (``KUBECONFIG_MODE``), carries a
client's whole identity and nothing it names can go missing or change under it.
"""

from __future__ import annotations

import base64
import json

__all__ = ["KUBECONFIG_MODE", "kubeconfig"]

KUBECONFIG_MODE = 0o600
"""A kubeconfig holds a private key: only the node may read it."""


def kubeconfig(
    server: str, ca_pem: bytes, certificate_pem: bytes, key_pem: bytes, user: str
) -> bytes:
    """A kubeconfig with one cluster, one user and one context (current), as JSON.

    :param server: the apiserver's URL, e.g. ``https://10.0.0.1:6443``.
    :param ca_pem: the CA the apiserver's serving certificate chains to.
    :param certificate_pem: the client certificate (its CN and O are who the client is).
    :param key_pem: the client certificate's private key.
    :param user: the name of the user entry (a label: the certificate says who it is).
    """
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kubernetes",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(certificate_pem),
                    "client-key-data": _b64(key_pem),
                },
            }
        ],
        "contexts": [{"name": user, "context": {"cluster": "kubernetes", "user": user}}],
        "current-context": user,
        "preferences": {},
    }
    return json.dumps(config, indent=2).encode() + b"\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
