"""``KubernetesCertificates`` on a real leading curator, over mutual TLS: a node gets its
own kubelet certificates from the Kubernetes CA in etcd, never another node's; the owner
gets an admin certificate, a narrower scope does not."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from roleserve_controlplane import EtcdBinary, NotLeadingHandler
from roleserve_controlplane.testing import (
    ETCD_SOURCES,
    CuratorCluster,
    CuratorNode,
    EtcdCluster,
    etcd_binary,
)
from roleserve_core import CuratorConnection, management_pb2
from roleserve_core.identity import (
    Credentials,
    UserCredentials,
    certificate_from_pem,
    generate_key,
    public_key_der,
    signing_request,
)
from roleserve_core.rpc import (
    CancellationSafeChannel,
    MethodAuthorization,
    Permission,
    method_authorization,
)
from roleserve_core.testing import SupervisorRunner, require_real
from roleserve_kubernetes.certificates import kubelet_certificates, kubelet_credentials
from roleserve_kubernetes.pki import load_or_create_pki
from roleserve_kubernetes.proto import kubernetes_pb2, kubernetes_pb2_grpc
from roleserve_kubernetes.service import curator_extension

pytestmark = pytest.mark.anyio

SERVICE = kubernetes_pb2.DESCRIPTOR.services_by_name["KubernetesCertificates"]


@pytest.fixture(params=ETCD_SOURCES)
def binary(request: pytest.FixtureRequest) -> EtcdBinary:
    return etcd_binary(request.param)


@pytest.fixture
async def curators(
    binary: EtcdBinary, tmp_path: Path, supervisor_runner: SupervisorRunner
) -> AsyncIterator[CuratorCluster]:
    """A bootstrapped cluster whose leading curator serves ``KubernetesCertificates``."""
    etcd = EtcdCluster(binary, tmp_path, supervisor_runner.start)
    async with CuratorCluster(etcd, extensions=[curator_extension()]) as curators:
        await curators.bootstrap()
        yield curators


def _stub(
    curators: CuratorCluster, leader: CuratorNode, credentials: Credentials
) -> tuple[CancellationSafeChannel, Any]:
    """A channel to the leader with ``credentials``, and the service's stub on it."""
    channel = curators.channel(leader, credentials)
    return channel, kubernetes_pb2_grpc.KubernetesCertificatesStub(channel)


def _request(node_id: str, *addresses: str) -> kubernetes_pb2.IssueCertificateRequest:
    key = public_key_der(generate_key().public_key())
    return kubernetes_pb2.IssueCertificateRequest(
        node_id=node_id,
        client_public_key=key,
        serving_public_key=key,
        serving_addresses=list(addresses),
    )


def _openssl_verify(tmp_path: Path, ca_pem: bytes, leaf_pem: bytes) -> None:
    openssl = shutil.which("openssl")
    require_real("openssl", openssl, "apt-get install openssl")
    assert openssl is not None
    (tmp_path / "ca.pem").write_bytes(ca_pem)
    (tmp_path / "leaf.pem").write_bytes(leaf_pem)
    result = subprocess.run(
        [openssl, "verify", "-CAfile", "ca.pem", "leaf.pem"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_issuing_is_for_nodes_and_the_admin_certificate_for_the_owner() -> None:
    """The methods' authorization options, as the curator's interceptor reads them."""
    node = method_authorization(f"/{SERVICE.full_name}/IssueCertificate")
    admin = method_authorization(f"/{SERVICE.full_name}/IssueAdminCertificate")
    assert node == MethodAuthorization(frozenset({Permission.UPDATE_NODE_SELF}), False)
    assert admin == MethodAuthorization(frozenset({Permission.MANAGE_CREDENTIALS}), False)


async def test_a_node_gets_its_own_kubelet_certificates_from_the_kubernetes_ca(
    curators: CuratorCluster, tmp_path: Path
) -> None:
    leader = await curators.leader()
    node = await curators.enrol(1)
    assert node.credentials is not None
    async with curators.channel(leader, node.credentials) as channel:
        connection = CuratorConnection(node.node_id, leader.node_id, leader.endpoint, channel)
        client, serving = await kubelet_certificates(connection)
    assert leader.member is not None
    async with leader.member.client() as etcd:
        ca = (await load_or_create_pki(etcd))["ca"]
    assert ca.certificate_pem is not None
    for pair in (client, serving):
        assert pair.certificate_pem is not None
        pair.certificate.verify_directly_issued_by(ca.certificate)
        _openssl_verify(tmp_path, ca.certificate_pem, pair.certificate_pem)
    subject = client.certificate.subject
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [
        f"system:node:{node.node_id}"
    ]
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:nodes"
    ]
    names = serving.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert names.value.get_values_for_type(x509.DNSName) == [node.node_id]
    assert names.value.get_values_for_type(x509.IPAddress) == [node.address]


async def test_a_node_gets_kube_proxy_s_certificate_as_system_kube_proxy(
    curators: CuratorCluster, tmp_path: Path
) -> None:
    """kube-proxy's own identity, no group: Kubernetes binds system:kube-proxy to the
    ClusterRole system:node-proxier (what a service proxy needs), not to a node's rights."""
    leader = await curators.leader()
    node = await curators.enrol(1)
    assert node.credentials is not None
    async with curators.channel(leader, node.credentials) as channel:
        connection = CuratorConnection(node.node_id, leader.node_id, leader.endpoint, channel)
        credentials = await kubelet_credentials(connection)
    proxy = credentials.proxy
    assert proxy is not None
    assert proxy.certificate_pem is not None
    _openssl_verify(tmp_path, credentials.ca_certificate_pem, proxy.certificate_pem)
    subject = proxy.certificate.subject
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [
        "system:kube-proxy"
    ]
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) == []


async def test_another_nodes_names_are_refused(curators: CuratorCluster) -> None:
    leader = await curators.leader()
    node, other = await curators.enrol(1), await curators.enrol(2)
    assert node.credentials is not None
    channel, stub = _stub(curators, leader, node.credentials)
    async with channel:
        for request, named in (
            (_request(other.node_id), other.node_id),
            (_request(node.node_id, str(other.address)), str(other.address)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.IssueCertificate(request)
            assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
            details = refused.value.details() or ""
            assert named in details
            assert details.endswith("a node gets certificates for its own names only")
        answer = await stub.IssueCertificate(_request(node.node_id, str(node.address)))
        assert answer.serving_certificate


async def test_a_user_cannot_ask_for_kubelet_certificates(curators: CuratorCluster) -> None:
    leader = await curators.leader()
    assert curators.owner is not None
    channel, stub = _stub(curators, leader, curators.owner)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.IssueCertificate(_request(leader.node_id))
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED


async def _scoped(curators: CuratorCluster, leader: CuratorNode, scope: str) -> UserCredentials:
    """Credentials of ``scope``, issued by the owner through the curator."""
    key = generate_key()
    channel, management = curators.management(leader)
    async with channel:
        issued = await management.IssueCredentials(
            management_pb2.IssueCredentialsRequest(
                name=f"a-{scope}", scope=scope, csr=signing_request(key, "ignored")
            )
        )
    return UserCredentials(
        key, certificate_from_pem(issued.certificate), certificate_from_pem(issued.ca_certificate)
    )


async def test_the_owner_gets_an_admin_certificate_and_a_viewer_does_not(
    curators: CuratorCluster,
) -> None:
    leader = await curators.leader()
    await curators.enrol(1)
    assert curators.owner is not None
    key = generate_key()
    request = kubernetes_pb2.IssueAdminCertificateRequest(csr=signing_request(key, "x"))
    channel, stub = _stub(curators, leader, curators.owner)
    async with channel:
        answer = await stub.IssueAdminCertificate(request)
    certificate = certificate_from_pem(answer.certificate)
    certificate.verify_directly_issued_by(certificate_from_pem(answer.ca_certificate))
    assert certificate.public_key() == key.public_key()
    assert certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "system:masters"
    )
    # The bootstrapped node holds kubernetes_controller; an enrolled one no role.
    assert list(answer.apiserver_endpoints) == [f"{leader.address}:6443"]
    viewer = await _scoped(curators, leader, "viewer")
    channel, stub = _stub(curators, leader, viewer)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.IssueAdminCertificate(request)
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED


def test_a_follower_answers_the_service_unavailable_naming_itself() -> None:
    handler = NotLeadingHandler("node-follower", [SERVICE])
    method = f"/{SERVICE.full_name}/IssueCertificate"
    details = cast(grpc.HandlerCallDetails, SimpleNamespace(method=method))
    assert handler.service(details) is not None
    assert NotLeadingHandler("node-follower").service(details) is None
