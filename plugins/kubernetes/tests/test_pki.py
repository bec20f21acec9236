"""The Kubernetes PKI: what Kubernetes checks in each certificate, and one PKI per cluster
in real etcd however many controllers start, and race, at once."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
)

from roleserve_controlplane import EtcdBinary, EtcdClient
from roleserve_controlplane.testing import ETCD_SOURCES, EtcdCluster, etcd_binary
from roleserve_core import LocalControlPlane
from roleserve_core.identity import certificate_to_pem, generate_key
from roleserve_core.testing import SupervisorRunner, require_real
from roleserve_kubernetes.pki import (
    PKI_NAMES,
    PKI_PREFIX,
    SERVICE_IP,
    SERVICE_NAMES,
    STORED_NAMES,
    KeyPair,
    KubernetesPKIError,
    apiserver_serving,
    controller_pki,
    etcd_client,
    generate_pki,
    kubelet_client_certificate,
    kubelet_serving_certificate,
    load_or_create_pki,
)

NODE = "node-0123456789abcdef0123456789abcdef"
ADDRESS = ipaddress.IPv4Address("192.0.2.7")
ServerName = x509.DNSName | x509.IPAddress

CLIENTS = {
    # entry: (issuing CA, CN, O)
    "front-proxy-client": ("front-proxy-ca", "front-proxy-client", []),
    "apiserver-kubelet-client": ("ca", "kube-apiserver-kubelet-client", ["system:masters"]),
    "controller-manager": ("ca", "system:kube-controller-manager", []),
    "scheduler": ("ca", "system:kube-scheduler", []),
    "admin": ("ca", "kubernetes-admin", ["system:masters"]),
}
"""What Kubernetes reads from each client certificate: its user (CN) and groups (O)."""


@pytest.fixture(scope="module")
def pki() -> dict[str, KeyPair]:
    made = generate_pki()
    made["apiserver"] = apiserver_serving(made, NODE, [ADDRESS])
    return made


def _verifier(
    ca: x509.Certificate, server_name: x509.DNSName | x509.IPAddress | None = None
) -> Any:
    """cryptography's chain verifier for ``ca``: a server's for ``server_name``, else a
    client's (which, unlike the web PKI, lets a client certificate go without names)."""
    builder = PolicyBuilder().store(Store([ca]))
    if server_name is not None:
        return builder.build_server_verifier(server_name)
    ee = ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.SubjectAlternativeName, Criticality.AGNOSTIC, None
    )
    ca_policy = ExtensionPolicy.webpki_defaults_ca()
    return builder.extension_policies(ca_policy=ca_policy, ee_policy=ee).build_client_verifier()


def _usages(certificate: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _names(certificate: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(attribute.value) for attribute in certificate.subject.get_attributes_for_oid(oid)]


def _openssl_verify(
    tmp_path: Path, ca: x509.Certificate, leaf: x509.Certificate, purpose: str
) -> None:
    openssl = shutil.which("openssl")
    require_real("openssl", openssl, "apt-get install openssl")
    assert openssl is not None
    (tmp_path / "ca.pem").write_bytes(certificate_to_pem(ca))
    (tmp_path / "leaf.pem").write_bytes(certificate_to_pem(leaf))
    result = subprocess.run(
        [openssl, "verify", "-purpose", purpose, "-CAfile", "ca.pem", "leaf.pem"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["ca", "front-proxy-ca"])
def test_the_cas_are_cas_that_sign_certificates(pki: dict[str, KeyPair], name: str) -> None:
    ca = pki[name].certificate
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert ca.issuer == ca.subject


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_each_client_certificate_names_its_user_and_groups_and_verifies(
    pki: dict[str, KeyPair], name: str, tmp_path: Path
) -> None:
    issuer, user, groups = CLIENTS[name]
    certificate = pki[name].certificate
    assert _names(certificate, NameOID.COMMON_NAME) == [user]
    assert _names(certificate, NameOID.ORGANIZATION_NAME) == groups
    assert _usages(certificate) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    _verifier(pki[issuer].certificate).verify(certificate, [])
    _openssl_verify(tmp_path, pki[issuer].certificate, certificate, "sslclient")
    other = "ca" if issuer == "front-proxy-ca" else "front-proxy-ca"
    with pytest.raises(x509.verification.VerificationError):
        _verifier(pki[other].certificate).verify(certificate, [])


@pytest.mark.parametrize(
    "name",
    [
        *(x509.DNSName(name) for name in (*SERVICE_NAMES, NODE)),
        x509.IPAddress(SERVICE_IP),
        x509.IPAddress(ADDRESS),
    ],
    ids=str,
)
def test_the_apiserver_serves_under_every_name_clients_dial(
    pki: dict[str, KeyPair], name: ServerName
) -> None:
    _verifier(pki["ca"].certificate, name).verify(pki["apiserver"].certificate, [])


def test_the_apiserver_certificate_is_for_serving_and_verifies_with_openssl(
    pki: dict[str, KeyPair], tmp_path: Path
) -> None:
    certificate = pki["apiserver"].certificate
    assert _usages(certificate) == {ExtendedKeyUsageOID.SERVER_AUTH}
    _openssl_verify(tmp_path, pki["ca"].certificate, certificate, "sslserver")
    with pytest.raises(x509.verification.VerificationError):
        _verifier(pki["ca"].certificate, x509.DNSName("node-other")).verify(certificate, [])


def test_the_service_account_entry_is_a_key_without_a_certificate(pki: dict[str, KeyPair]) -> None:
    assert pki["service-account"].certificate_pem is None
    assert pki["service-account"].key is not None


def test_kubelet_certificates_name_the_node_and_verify(
    pki: dict[str, KeyPair], tmp_path: Path
) -> None:
    client = kubelet_client_certificate(pki, NODE, generate_key().public_key())
    serving = kubelet_serving_certificate(pki, NODE, [ADDRESS], generate_key().public_key())
    assert _names(client, NameOID.COMMON_NAME) == [f"system:node:{NODE}"]
    assert _names(client, NameOID.ORGANIZATION_NAME) == ["system:nodes"]
    assert _usages(client) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    _openssl_verify(tmp_path, pki["ca"].certificate, client, "sslclient")
    for name in (x509.DNSName(NODE), x509.IPAddress(ADDRESS)):
        _verifier(pki["ca"].certificate, name).verify(serving, [])
    _openssl_verify(tmp_path, pki["ca"].certificate, serving, "sslserver")


# -- etcd ---------------------------------------------------------------------------


@pytest.fixture(params=ETCD_SOURCES)
def binary(request: pytest.FixtureRequest) -> EtcdBinary:
    return etcd_binary(request.param)


@pytest.fixture
async def cluster(
    binary: EtcdBinary, tmp_path: Path, supervisor_runner: SupervisorRunner
) -> EtcdCluster:
    etcd = EtcdCluster(binary, tmp_path, supervisor_runner.start)
    await etcd.bootstrap()
    return etcd


@pytest.fixture
async def etcd(cluster: EtcdCluster) -> AsyncIterator[EtcdClient]:
    async with cluster.client() as client:
        yield client


def _same(a: dict[str, KeyPair], b: dict[str, KeyPair]) -> bool:
    return all(a[name] == b[name] for name in STORED_NAMES)


@pytest.mark.anyio
async def test_the_first_controller_stores_the_pki_and_a_second_reuses_it(
    cluster: EtcdCluster, etcd: EtcdClient
) -> None:
    member = cluster.members[0].config
    control_plane = LocalControlPlane("unused:7835", member.endpoint, member.credentials)
    async with etcd_client(control_plane) as first:
        one = await controller_pki(first, NODE, [ADDRESS])
    assert sorted(one) == sorted(PKI_NAMES)
    stored, _ = await etcd.get_prefix(PKI_PREFIX)
    assert sorted(kv.key.decode() for kv in stored) == sorted(PKI_PREFIX + n for n in STORED_NAMES)
    other = ipaddress.IPv4Address("192.0.2.8")
    two = await controller_pki(etcd, "node-ffffffffffffffffffffffffffffffff", [other])
    assert _same(one, two)
    assert one["apiserver"] != two["apiserver"]  # each controller serves its own
    _verifier(one["ca"].certificate, x509.IPAddress(other)).verify(two["apiserver"].certificate, [])


@pytest.mark.anyio
async def test_controllers_racing_make_one_pki(cluster: EtcdCluster) -> None:
    results: list[dict[str, KeyPair]] = []

    async def start_one() -> None:
        async with cluster.client() as client:
            results.append(await load_or_create_pki(client))

    async with anyio.create_task_group() as tasks:
        for _ in range(4):
            tasks.start_soon(start_one)
    assert all(_same(results[0], other) for other in results[1:])
    async with cluster.client() as client:
        assert _same(results[0], await load_or_create_pki(client))


@pytest.mark.anyio
async def test_an_incomplete_pki_is_refused_naming_the_missing_key(etcd: EtcdClient) -> None:
    await load_or_create_pki(etcd)
    await etcd.delete(PKI_PREFIX + "scheduler")
    with pytest.raises(KubernetesPKIError, match=f"lacks {PKI_PREFIX}scheduler;.*etcdctl del"):
        await load_or_create_pki(etcd)


@pytest.mark.anyio
async def test_a_corrupt_entry_is_refused_naming_it(etcd: EtcdClient) -> None:
    await load_or_create_pki(etcd)
    await etcd.put(PKI_PREFIX + "admin", b'{"key": "not a key", "certificate": null}')
    with pytest.raises(KubernetesPKIError, match=f"{PKI_PREFIX}admin in etcd is corrupt"):
        await load_or_create_pki(etcd)
