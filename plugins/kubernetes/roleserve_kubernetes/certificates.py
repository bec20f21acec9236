"""The kubelet's certificates, from the leading curator: what a worker node runs kubelet with.

::

    kubelet_certificates(curator_connection)
        new client key + new serving key (here; they never leave the node)
        ──▶ KubernetesCertificates.IssueCertificate over the node's mutual TLS channel
            (the curator checks the caller is the node named, and its reported address)
        ──▶ client: CN system:node:<node ID>, O system:nodes
            serving: the node's ID and address
            proxy: CN system:kube-proxy (kube-proxy's), all checked against the Kubernetes CA

The node proves who it is with its node certificate (the channel's), so the request
carries only public keys. Call again for new certificates (at each start of the kubelet):
they are cheap, and a node's address may have changed since.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from roleserve_core import CertificateVerificationError, CuratorConnection, IdentityError
from roleserve_core.identity import PrivateKey, certificate_from_pem, generate_key, public_key_der
from roleserve_kubernetes.pki import PROXY_USER, KeyPair, node_user
from roleserve_kubernetes.proto import kubernetes_pb2, kubernetes_pb2_grpc

__all__ = ["CALL_TIMEOUT", "KubeletCredentials", "kubelet_certificates", "kubelet_credentials"]

CALL_TIMEOUT = 15.0
"""Seconds the curator may take (it reads the PKI from etcd at a term's first call)."""


@dataclass(frozen=True, slots=True)
class KubeletCredentials:
    """A kubelet's certificates and the CA the apiserver's certificate chains to."""

    client: KeyPair
    serving: KeyPair
    ca_certificate_pem: bytes
    proxy: KeyPair | None = None
    """kube-proxy's client certificate (``system:kube-proxy``); None from a curator too
    old to issue it, or where it was not asked for."""


async def kubelet_certificates(
    curator_connection: CuratorConnection,
    addresses: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
) -> tuple[KeyPair, KeyPair]:
    """This node's kubelet client and serving certificates, with new keys.

    :param curator_connection: the node's connection to the leading curator (its node
        certificate is the kubelet's proof of identity).
    :param addresses: what the serving certificate names; empty: the address the node
        reported. The curator refuses any other than that one.
    :raises grpc.aio.AioRpcError: if the curator refuses or does not answer.
    :raises CertificateVerificationError: if an answer is not what was asked for.
    """
    credentials = await kubelet_credentials(curator_connection, addresses)
    return credentials.client, credentials.serving


async def kubelet_credentials(
    curator_connection: CuratorConnection,
    addresses: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
) -> KubeletCredentials:
    """``kubelet_certificates`` with the Kubernetes CA (the kubelet's ``--client-ca-file``
    and the trust of its kubeconfig)."""
    client_key, serving_key, proxy_key = generate_key(), generate_key(), generate_key()
    stub = kubernetes_pb2_grpc.KubernetesCertificatesStub(curator_connection.channel)
    response = await stub.IssueCertificate(
        kubernetes_pb2.IssueCertificateRequest(
            node_id=curator_connection.node_id,
            client_public_key=public_key_der(client_key.public_key()),
            serving_public_key=public_key_der(serving_key.public_key()),
            serving_addresses=[str(address) for address in addresses],
            proxy_public_key=public_key_der(proxy_key.public_key()),
        ),
        timeout=CALL_TIMEOUT,
    )
    ca = _parsed(response.ca_certificate, "the Kubernetes CA")
    client = _checked(response.client_certificate, client_key, ca, "kubelet client")
    serving = _checked(response.serving_certificate, serving_key, ca, "kubelet serving")
    user = node_user(curator_connection.node_id)
    if _common_name(client) != user:
        raise CertificateVerificationError(f"the kubelet client certificate is not for {user}")
    proxy = None
    if response.proxy_certificate:
        proxy = _checked(response.proxy_certificate, proxy_key, ca, "kube-proxy client")
        if _common_name(proxy) != PROXY_USER:
            raise CertificateVerificationError(
                f"the kube-proxy client certificate is not for {PROXY_USER}"
            )
    return KubeletCredentials(
        KeyPair.of(client_key, client),
        KeyPair.of(serving_key, serving),
        response.ca_certificate,
        None if proxy is None else KeyPair.of(proxy_key, proxy),
    )


def _parsed(pem: bytes, what: str) -> x509.Certificate:
    try:
        return certificate_from_pem(pem, what)
    except IdentityError as exc:
        raise CertificateVerificationError(f"the curator answered with {exc}") from None


def _checked(pem: bytes, key: PrivateKey, ca: x509.Certificate, what: str) -> x509.Certificate:
    """The ``what`` certificate (``kubelet client``, say): for ``key``, issued by ``ca``."""
    certificate = _parsed(pem, f"the {what} certificate")
    if certificate.public_key() != key.public_key():
        raise CertificateVerificationError(f"the {what} certificate is not for its key")
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise CertificateVerificationError(
            f"the {what} certificate is not issued by the Kubernetes CA: {exc}"
        ) from None
    return certificate


def _common_name(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""
