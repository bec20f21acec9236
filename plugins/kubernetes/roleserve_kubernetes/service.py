"""The ``KubernetesCertificates`` service, on the leading curator: certificates of the
Kubernetes CA for kubelets and for the cluster's admin.

::

    hook roleserve_curator_services ──▶ CuratorExtension(add) ──▶ on each election won:
        KubernetesCertificates(CuratorLeader)
          IssueCertificate        node-authenticated; node_id must be the caller's, serving
                                  addresses its reported one ──▶ kubelet client + serving
                                  (+ kube-proxy's client, system:kube-proxy, if asked)
          IssueAdminCertificate   MANAGE_CREDENTIALS (owner) ──▶ CN = the caller,
                                  O system:masters, ADMIN_LIFETIME; the controllers' :6443
          both: the PKI from etcd (load_or_create_pki: made here if no controller made it
                yet, by the same one transaction), read once per term

Why the curator and not a controller: the curator already knows who calls (mutual TLS,
the authorization option in the proto) and each node's reported address, and is the one
service every node reaches; the PKI is in etcd, which the curator holds a client of.

Why a fresh admin certificate rather than handing out the stored ``admin`` entry: a
certificate per user names who acted in the apiserver's audit log, and lets one expire
without changing everyone's; the stored key would have to leave etcd for every caller, for
good. Kubernetes cannot revoke a client certificate, so it is short-lived
(``ADMIN_LIFETIME``): run ``roleserve ctl kubeconfig`` again for a new one.
"""

from __future__ import annotations

import datetime
import ipaddress
from typing import Any

import grpc
from typing_extensions import override

from roleserve_controlplane import CuratorExtension, CuratorLeader, csr_key, handled
from roleserve_core import IdentityError, RefusedError
from roleserve_core.identity import PublicKey, certificate_to_pem, public_key_from_der
from roleserve_core.limits import MAX_KEY_BYTES, check_bytes
from roleserve_core.rpc import NodePeer, UserPeer, current_peer
from roleserve_kubernetes.pki import (
    KeyPair,
    KubernetesPKIError,
    admin_certificate,
    kubelet_client_certificate,
    kubelet_serving_certificate,
    load_or_create_pki,
    proxy_client_certificate,
)
from roleserve_kubernetes.proto import kubernetes_pb2, kubernetes_pb2_grpc

__all__ = ["ADMIN_LIFETIME", "APISERVER_PORT", "KubernetesCertificates", "curator_extension"]

ADMIN_LIFETIME = datetime.timedelta(days=30)
"""How long an admin certificate is valid (Kubernetes cannot revoke it)."""
APISERVER_PORT = 6443
"""kube-apiserver's secure port on every controller."""
MAX_ADDRESSES = 8
"""Most serving addresses a request may name (a node reports one)."""

Context = Any


class KubernetesCertificates(kubernetes_pb2_grpc.KubernetesCertificatesServicer):
    """The service, for one term of one leading curator."""

    def __init__(self, leader: CuratorLeader) -> None:
        self.leader = leader
        self._pki: dict[str, KeyPair] | None = None

    async def pki(self) -> dict[str, KeyPair]:
        """The PKI, read (or made) at the first call of the term."""
        if self._pki is None:
            try:
                self._pki = await load_or_create_pki(self.leader.etcd)
            except KubernetesPKIError as exc:
                raise RefusedError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        return self._pki

    @override
    @handled
    async def IssueCertificate(
        self, request: kubernetes_pb2.IssueCertificateRequest, context: Context
    ) -> kubernetes_pb2.IssueCertificateResponse:
        node_id = _own_node(request.node_id)
        addresses = self._serving_addresses(node_id, request.serving_addresses)
        client_key = _public_key("client_public_key", request.client_public_key)
        serving_key = _public_key("serving_public_key", request.serving_public_key)
        pki = await self.pki()
        client = kubelet_client_certificate(pki, node_id, client_key)
        serving = kubelet_serving_certificate(pki, node_id, addresses, serving_key)
        response = kubernetes_pb2.IssueCertificateResponse(
            client_certificate=certificate_to_pem(client),
            serving_certificate=certificate_to_pem(serving),
            ca_certificate=certificate_to_pem(pki["ca"].certificate),
        )
        if request.proxy_public_key:
            proxy_key = _public_key("proxy_public_key", request.proxy_public_key)
            proxy = proxy_client_certificate(pki, proxy_key)
            response.proxy_certificate = certificate_to_pem(proxy)
        return response

    @override
    @handled
    async def IssueAdminCertificate(
        self, request: kubernetes_pb2.IssueAdminCertificateRequest, context: Context
    ) -> kubernetes_pb2.IssueAdminCertificateResponse:
        peer = current_peer()
        if not isinstance(peer, UserPeer):  # the authorization option admits users only
            raise RefusedError(grpc.StatusCode.PERMISSION_DENIED, "only users may call this")
        key = csr_key(request.csr)
        pki = await self.pki()
        certificate = admin_certificate(pki, peer.identity, key, ADMIN_LIFETIME)
        endpoints = [
            _endpoint(address) for _, address in self.leader.role_addresses("kubernetes_controller")
        ]
        return kubernetes_pb2.IssueAdminCertificateResponse(
            certificate=certificate_to_pem(certificate),
            ca_certificate=certificate_to_pem(pki["ca"].certificate),
            apiserver_endpoints=endpoints,
            not_after=int(certificate.not_valid_after_utc.timestamp()),
        )

    def _serving_addresses(
        self, node_id: str, requested: Any
    ) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        """The node's reported address, which every requested one must be."""
        reported = self.leader.node_address(node_id)
        if reported is None:
            raise RefusedError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"node {node_id} has reported no address yet (UpdateNodeStatus); retry later",
            )
        if len(requested) > MAX_ADDRESSES:
            raise RefusedError(
                grpc.StatusCode.INVALID_ARGUMENT, f"at most {MAX_ADDRESSES} serving addresses"
            )
        for text in requested:
            if _parsed(text) != reported:
                raise RefusedError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"serving address {text[:64]!r} is not node {node_id}'s address "
                    f"({reported}); a node gets certificates for its own names only",
                )
        return [reported]


def _own_node(requested: str) -> str:
    """The caller's node ID, which ``requested`` must be."""
    peer = current_peer()
    if not isinstance(peer, NodePeer):
        raise RefusedError(grpc.StatusCode.PERMISSION_DENIED, "only nodes may call this")
    if requested != peer.node_id:
        raise RefusedError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"node {peer.node_id} asked for the certificates of {requested[:64]!r}; a node "
            "gets certificates for its own names only",
        )
    return peer.node_id


def _public_key(field: str, der: bytes) -> PublicKey:
    check_bytes(field, der, MAX_KEY_BYTES)
    try:
        return public_key_from_der(der)
    except IdentityError as exc:
        raise RefusedError(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {exc}") from None


def _parsed(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _endpoint(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    host = f"[{address}]" if address.version == 6 else str(address)
    return f"{host}:{APISERVER_PORT}"


def curator_extension() -> CuratorExtension:
    """The service as an extension of the leading curator (``roleserve_curator_services``)."""

    def add(server: grpc.aio.Server, leader: CuratorLeader) -> None:
        servicer = KubernetesCertificates(leader)
        kubernetes_pb2_grpc.add_KubernetesCertificatesServicer_to_server(servicer, server)

    descriptor = kubernetes_pb2.DESCRIPTOR.services_by_name["KubernetesCertificates"]
    return CuratorExtension([descriptor], add)
