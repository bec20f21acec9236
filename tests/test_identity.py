"""The cluster PKI: keys and node IDs, issuing, verification, credentials on disk.

Verification follows the seven cases of Monogon's ``certificates_test.go`` (TestCertificates),
adapted to P-256 and to roleserve's certificates: the bad certificates are built here with
``CertificateBuilder`` (``build_certificate``), each differing from a valid one in the one
thing its case names, and signed by the test's CA. Validity is checked with ``now=`` and
explicit dates, never by waiting.

A few files hold a sect163k1 key, a well-formed key that ``cryptography`` parses but cannot
load (``UnsupportedAlgorithm``); they must be refused like any other bad input.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from roleserve_core.errors import CertificateVerificationError, CredentialsError, IdentityError
from roleserve_core.identity import (
    ANY_NODE_NAME,
    CA_FILE,
    CA_NAME,
    CERTIFICATE_FILE,
    DEFAULT_VALIDITY,
    KEY_FILE,
    NODE_ID_PREFIX,
    EphemeralCredentials,
    NodeCredentials,
    PrivateKey,
    PublicKey,
    UserCredentials,
    certificate_from_pem,
    certificate_to_pem,
    create_ca,
    enrolment_ca,
    generate_key,
    issue_ephemeral_certificate,
    issue_node_certificate,
    issue_user_certificate,
    node_id,
    private_key_from_pem,
    private_key_to_pem,
    public_key_der,
    public_key_from_der,
    verify_ca,
    verify_ephemeral_certificate,
    verify_node_certificate,
    verify_user_certificate,
)

E = TypeVar("E", bound=x509.ExtensionType)

SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH
CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH
NODE_USAGES = (SERVER_AUTH, CLIENT_AUTH)

USER_IDENTITY = "alice"
WRONG_NODE_ID = NODE_ID_PREFIX + "0" * 32
"""Shaped like a node ID, but the ID of no key."""

# Validity of the certificates built by hand: valid whenever the tests run.
BUILT_FROM = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
BUILT_UNTIL = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)

# An explicit validity window in the future, for the tests of dates.
WINDOW_START = dt.datetime(2031, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
WINDOW_END = dt.datetime(2032, 7, 8, 9, 10, 11, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)

# Made with `openssl ecparam -name sect163k1 -genkey`, `openssl pkcs8 -topk8 -nocrypt`,
# `openssl pkey -pubout -outform DER` and `openssl req -x509 -subj "/CN=roleserve cluster CA"
# -addext basicConstraints=critical,CA:TRUE,pathlen:0 -addext keyUsage=critical,keyCertSign`.
SECT163K1_KEY_PEM = b"""-----BEGIN PRIVATE KEY-----
MGMCAQAwEAYHKoZIzj0CAQYFK4EEAAEETDBKAgEBBBUC6YmBuWbmvNacfadV9C5S
dK2jeyqhLgMsAAQEKUgdsN06cv0X0R0mQMx6QzJSDUoAHJsa5pH7zORqe9rLKnPp
Lq/BHZo=
-----END PRIVATE KEY-----
"""
SECT163K1_PUBLIC_DER = bytes.fromhex(
    "3040301006072a8648ce3d020106052b81040001032c00040429481db0dd3a72fd17d11d2640cc7a4332"
    "520d4a001c9b1ae691fbcce46a7bdacb2a73e92eafc11d9a"
)
SECT163K1_CA_PEM = b"""-----BEGIN CERTIFICATE-----
MIIBeDCCATWgAwIBAgIUeNs2xFV5y9M7Cr6UtVwnsQhI3RgwCgYIKoZIzj0EAwIw
HzEdMBsGA1UEAwwUcm9sZXNlcnZlIGNsdXN0ZXIgQ0EwIBcNMjYxMjAyMTMzMDA0
WhgPMjEyNjExMDgxMzMwMDRaMB8xHTAbBgNVBAMMFHJvbGVzZXJ2ZSBjbHVzdGVy
IENBMEAwEAYHKoZIzj0CAQYFK4EEAAEDLAAEBClIHbDdOnL9F9EdJkDMekMyUg1K
ABybGuaR+8zkanvayypz6S6vwR2ao2YwZDAdBgNVHQ4EFgQUyGSg6IWYL/tv7PSa
fIjU+6I0B1swHwYDVR0jBBgwFoAUyGSg6IWYL/tv7PSafIjU+6I0B1swEgYDVR0T
AQH/BAgwBgEB/wIBADAOBgNVHQ8BAf8EBAMCAYYwCgYIKoZIzj0EAwIDMQAwLgIV
AnoZS7QkByRBjU+pox6K70ZJUuZmAhUDaxQrdFP8aYPFoudUFyij1n3nijc=
-----END CERTIFICATE-----
"""


# -- helpers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Authority:
    """A CA's private key and certificate: what issues certificates in these tests."""

    key: PrivateKey
    certificate: x509.Certificate


@dataclass(frozen=True)
class Cluster:
    """A cluster CA with one node and one user, all issued by the package."""

    ca: Authority
    node_key: PrivateKey
    node_certificate: x509.Certificate
    user_key: PrivateKey
    user_certificate: x509.Certificate

    def node_credentials(self) -> NodeCredentials:
        return NodeCredentials(self.node_key, self.node_certificate, self.ca.certificate)

    def user_credentials(self) -> UserCredentials:
        return UserCredentials(self.user_key, self.user_certificate, self.ca.certificate)


def new_cluster() -> Cluster:
    ca_key = generate_key()
    ca = Authority(ca_key, create_ca(ca_key))
    node_key, user_key = generate_key(), generate_key()
    node = issue_node_certificate(ca.key, ca.certificate, node_key.public_key())
    user = issue_user_certificate(ca.key, ca.certificate, user_key.public_key(), USER_IDENTITY)
    return Cluster(ca, node_key, node, user_key, user)


@pytest.fixture
def cluster() -> Cluster:
    return new_cluster()


@pytest.fixture
def other_cluster() -> Cluster:
    """A second cluster: its CA has the same name as ``cluster``'s, but another key."""
    return new_cluster()


def name(common_name: str | None) -> x509.Name:
    """A subject with this CN, or with no attribute at all (how Go writes an empty CN)."""
    if common_name is None:
        return x509.Name([])
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def build_certificate(
    public_key: PublicKey,
    *,
    signer: PrivateKey,
    issuer: x509.Name,
    subject: x509.Name,
    ca: bool = False,
    key_cert_sign: bool = False,
    usages: Sequence[x509.ObjectIdentifier] = (),
    dns_names: Sequence[str] = (),
) -> x509.Certificate:
    """A certificate built by hand; no ExtendedKeyUsage or SAN extension when empty."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(BUILT_FROM)
        .not_valid_after(BUILT_UNTIL)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=key_cert_sign,
                crl_sign=key_cert_sign,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    if dns_names:
        sans = [x509.DNSName(dns) for dns in dns_names]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def build_ca(
    key: PrivateKey,
    *,
    ca: bool = True,
    key_cert_sign: bool = True,
    common_name: str = CA_NAME,
    issued_by: Authority | None = None,
) -> x509.Certificate:
    """A CA certificate for ``key``: self-signed unless ``issued_by`` is given."""
    subject = name(common_name)
    signer, issuer = (
        (key, subject) if issued_by is None else (issued_by.key, issued_by.certificate.subject)
    )
    return build_certificate(
        key.public_key(),
        signer=signer,
        issuer=issuer,
        subject=subject,
        ca=ca,
        key_cert_sign=key_cert_sign,
    )


def build_leaf(
    authority: Authority,
    public_key: PublicKey,
    subject: x509.Name,
    *,
    usages: Sequence[x509.ObjectIdentifier],
    dns_names: Sequence[str] = (),
    ca: bool = False,
) -> x509.Certificate:
    """A certificate issued by ``authority``; a CA one (``ca``) may sign certificates."""
    return build_certificate(
        public_key,
        signer=authority.key,
        issuer=authority.certificate.subject,
        subject=subject,
        ca=ca,
        key_cert_sign=ca,
        usages=usages,
        dns_names=dns_names,
    )


def with_unknown_signature_algorithm(certificate: x509.Certificate) -> x509.Certificate:
    """``certificate`` with its signature algorithm (ecdsa-with-SHA256) replaced by an OID
    that names no algorithm."""
    der = certificate.public_bytes(serialization.Encoding.DER)
    known = bytes.fromhex("06082a8648ce3d040302")  # 1.2.840.10045.4.3.2
    assert der.count(known) == 2  # in the signed part and next to the signature
    unknown = bytes.fromhex("06082a8648ce3d040309")  # 1.2.840.10045.4.3.9
    return x509.load_der_x509_certificate(der.replace(known, unknown))


def spki(key: PrivateKeyTypes) -> bytes:
    """The DER SubjectPublicKeyInfo of ``key``'s public key, computed here."""
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def pkcs8(key: PrivateKeyTypes) -> bytes:
    """An unencrypted PKCS#8 PEM of any private key, computed here."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def p384_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP384R1())


def extension(certificate: x509.Certificate, kind: type[E]) -> E:
    return certificate.extensions.get_extension_for_class(kind).value


def usages(certificate: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(extension(certificate, x509.ExtendedKeyUsage))


def common_names(certificate: x509.Certificate) -> list[str | bytes]:
    return [a.value for a in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


class Issue(Protocol):
    def __call__(
        self,
        authority: Authority,
        key: PrivateKey,
        *,
        not_before: dt.datetime | None = None,
        not_after: dt.datetime | None = None,
    ) -> x509.Certificate: ...


def issue_ca(
    authority: Authority,
    key: PrivateKey,
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> x509.Certificate:
    return create_ca(key, not_before=not_before, not_after=not_after)


def issue_node(
    authority: Authority,
    key: PrivateKey,
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> x509.Certificate:
    return issue_node_certificate(
        authority.key,
        authority.certificate,
        key.public_key(),
        not_before=not_before,
        not_after=not_after,
    )


def issue_user(
    authority: Authority,
    key: PrivateKey,
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> x509.Certificate:
    return issue_user_certificate(
        authority.key,
        authority.certificate,
        key.public_key(),
        USER_IDENTITY,
        not_before=not_before,
        not_after=not_after,
    )


def issue_ephemeral(
    authority: Authority,
    key: PrivateKey,
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> x509.Certificate:
    return issue_ephemeral_certificate(key, not_before=not_before, not_after=not_after)


EVERY_ISSUER = pytest.mark.parametrize(
    "issue",
    [
        pytest.param(issue_ca, id="ca"),
        pytest.param(issue_node, id="node"),
        pytest.param(issue_user, id="user"),
        pytest.param(issue_ephemeral, id="ephemeral"),
    ],
)


class Verify(Protocol):
    def __call__(
        self, certificate: x509.Certificate, ca: x509.Certificate, *, now: dt.datetime | None
    ) -> str: ...


def verify_node(
    certificate: x509.Certificate, ca: x509.Certificate, *, now: dt.datetime | None
) -> str:
    return verify_node_certificate(certificate, ca, now=now)


def verify_user(
    certificate: x509.Certificate, ca: x509.Certificate, *, now: dt.datetime | None
) -> str:
    return verify_user_certificate(certificate, ca, now=now)


@dataclass(frozen=True)
class Kind:
    """Node or user: how to issue such a certificate, verify one, and what it proves."""

    issue: Issue
    verify: Verify
    identity: Callable[[PrivateKey], str]


NODE = Kind(issue_node, verify_node, lambda key: node_id(key.public_key()))
USER = Kind(issue_user, verify_user, lambda key: USER_IDENTITY)
BOTH_KINDS = pytest.mark.parametrize(
    "kind", [pytest.param(NODE, id="node"), pytest.param(USER, id="user")]
)


# -- keys and node IDs --------------------------------------------------------------------


def test_generate_key_gives_a_new_p256_key_each_call() -> None:
    first, second = generate_key(), generate_key()
    for key in (first, second):
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert isinstance(key.curve, ec.SECP256R1)
    assert spki(first) != spki(second)


def test_node_id_is_the_prefix_and_32_hex_of_sha256_over_the_spki() -> None:
    key = generate_key()
    identity = node_id(key.public_key())
    assert identity == "node-" + hashlib.sha256(spki(key)).hexdigest()[:32]
    assert re.fullmatch(r"node-[0-9a-f]{32}", identity)


def test_node_id_is_stable_for_the_same_key_however_it_was_encoded() -> None:
    key = generate_key()
    identity = node_id(key.public_key())
    assert node_id(private_key_from_pem(private_key_to_pem(key)).public_key()) == identity
    assert node_id(public_key_from_der(public_key_der(key.public_key()))) == identity
    assert node_id(key.public_key()) == identity


def test_node_ids_of_different_keys_differ() -> None:
    ids = {node_id(generate_key().public_key()) for _ in range(16)}
    assert len(ids) == 16


def test_private_key_pem_round_trips_as_unencrypted_pkcs8() -> None:
    key = generate_key()
    pem = private_key_to_pem(key)
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert private_key_from_pem(pem).private_numbers() == key.private_numbers()


def test_public_key_der_round_trips() -> None:
    key = generate_key()
    assert public_key_der(key.public_key()) == spki(key)
    assert public_key_from_der(spki(key)).public_numbers() == key.public_key().public_numbers()


def test_certificate_pem_round_trips(cluster: Cluster) -> None:
    pem = certificate_to_pem(cluster.node_certificate)
    assert pem.startswith(b"-----BEGIN CERTIFICATE-----\n")
    assert certificate_from_pem(pem) == cluster.node_certificate


@pytest.mark.parametrize(
    ("pem", "reason"),
    [
        pytest.param(lambda: b"garbage", "is not a PEM private key", id="garbage"),
        pytest.param(lambda: pkcs8(rsa_key()), "is not an ECDSA P-256", id="rsa"),
        pytest.param(
            lambda: pkcs8(ed25519.Ed25519PrivateKey.generate()),
            "is not an ECDSA P-256",
            id="ed25519",
        ),
        pytest.param(lambda: pkcs8(p384_key()), "is not an ECDSA P-256", id="p384"),
        pytest.param(
            lambda: generate_key().private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(b"secret"),
            ),
            "is not a PEM private key",
            id="encrypted",
        ),
        pytest.param(lambda: SECT163K1_KEY_PEM, "is not a PEM private key", id="sect163k1"),
    ],
)
def test_private_key_from_pem_refuses_anything_but_p256_naming_the_source(
    pem: Callable[[], bytes], reason: str
) -> None:
    with pytest.raises(IdentityError) as raised:
        private_key_from_pem(pem(), "/var/lib/roleserve/key.pem")
    assert str(raised.value).startswith(f"/var/lib/roleserve/key.pem {reason}")


@pytest.mark.parametrize(
    ("der", "reason"),
    [
        pytest.param(lambda: b"garbage", "not a DER public key", id="garbage"),
        pytest.param(lambda: b"", "not a DER public key", id="empty"),
        pytest.param(lambda: spki(rsa_key()), "not an ECDSA P-256 key", id="rsa"),
        pytest.param(
            lambda: spki(ed25519.Ed25519PrivateKey.generate()),
            "not an ECDSA P-256 key",
            id="ed25519",
        ),
        pytest.param(lambda: spki(p384_key()), "not an ECDSA P-256 key", id="p384"),
        pytest.param(lambda: SECT163K1_PUBLIC_DER, "not a DER public key", id="sect163k1"),
    ],
)
def test_public_key_from_der_refuses_anything_but_p256(
    der: Callable[[], bytes], reason: str
) -> None:
    with pytest.raises(IdentityError, match=reason):
        public_key_from_der(der())


def test_certificate_from_pem_refuses_garbage_naming_the_source(cluster: Cluster) -> None:
    truncated = certificate_to_pem(cluster.node_certificate)[:200]
    with pytest.raises(IdentityError, match=r"^/etc/cert\.pem is not a PEM certificate"):
        certificate_from_pem(truncated, "/etc/cert.pem")


# -- issuing ------------------------------------------------------------------------------


def test_the_ca_is_self_signed_may_sign_leaves_only_and_verifies(cluster: Cluster) -> None:
    ca = cluster.ca.certificate
    assert ca.subject == ca.issuer == name(CA_NAME)
    ca.verify_directly_issued_by(ca)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert (constraints.value.ca, constraints.value.path_length) == (True, 0)
    assert extension(ca, x509.KeyUsage).key_cert_sign
    ski = extension(ca, x509.SubjectKeyIdentifier)
    assert ski == x509.SubjectKeyIdentifier.from_public_key(cluster.ca.key.public_key())
    assert ca.public_key() == cluster.ca.key.public_key()
    verify_ca(ca)


def test_a_node_certificate_names_its_node_and_serves_and_connects(cluster: Cluster) -> None:
    certificate, ca = cluster.node_certificate, cluster.ca.certificate
    identity = node_id(cluster.node_key.public_key())
    assert common_names(certificate) == [identity]
    sans = extension(certificate, x509.SubjectAlternativeName)
    assert sans.get_values_for_type(x509.DNSName) == [identity, ANY_NODE_NAME]
    assert set(usages(certificate)) == {SERVER_AUTH, CLIENT_AUTH}
    assert not extension(certificate, x509.BasicConstraints).ca
    assert not extension(certificate, x509.KeyUsage).key_cert_sign
    assert certificate.public_key() == cluster.node_key.public_key()
    assert certificate.issuer == ca.subject
    certificate.verify_directly_issued_by(ca)
    aki = extension(certificate, x509.AuthorityKeyIdentifier)
    assert aki.key_identifier == extension(ca, x509.SubjectKeyIdentifier).digest


def test_a_user_certificate_names_its_identity_and_only_connects(cluster: Cluster) -> None:
    certificate, ca = cluster.user_certificate, cluster.ca.certificate
    assert common_names(certificate) == [USER_IDENTITY]
    assert usages(certificate) == [CLIENT_AUTH]
    assert not extension(certificate, x509.BasicConstraints).ca
    with pytest.raises(x509.ExtensionNotFound):
        extension(certificate, x509.SubjectAlternativeName)
    assert certificate.public_key() == cluster.user_key.public_key()
    certificate.verify_directly_issued_by(ca)
    aki = extension(certificate, x509.AuthorityKeyIdentifier)
    assert aki.key_identifier == extension(ca, x509.SubjectKeyIdentifier).digest


def test_a_user_certificate_needs_an_identity(cluster: Cluster) -> None:
    ca = cluster.ca
    with pytest.raises(ValueError, match="needs an identity"):
        issue_user_certificate(ca.key, ca.certificate, generate_key().public_key(), "")


@EVERY_ISSUER
def test_default_validity_starts_minutes_ago_and_lasts_the_default(
    issue: Issue, cluster: Cluster
) -> None:
    before = dt.datetime.now(dt.UTC)
    certificate = issue(cluster.ca, generate_key())
    after = dt.datetime.now(dt.UTC)
    start = certificate.not_valid_before_utc
    # In the past by a few minutes (clock skew), whole seconds in the certificate.
    assert before - dt.timedelta(minutes=10) <= start <= after - dt.timedelta(minutes=1)
    assert certificate.not_valid_after_utc - start == DEFAULT_VALIDITY


@EVERY_ISSUER
def test_explicit_validity_is_honoured(issue: Issue, cluster: Cluster) -> None:
    certificate = issue(cluster.ca, generate_key(), not_before=WINDOW_START, not_after=WINDOW_END)
    assert certificate.not_valid_before_utc == WINDOW_START
    assert certificate.not_valid_after_utc == WINDOW_END
    only_start = issue(cluster.ca, generate_key(), not_before=WINDOW_START)
    assert only_start.not_valid_before_utc == WINDOW_START
    assert only_start.not_valid_after_utc == WINDOW_START + DEFAULT_VALIDITY


def test_an_ephemeral_certificate_comes_from_the_enrolment_ca_and_names_its_key() -> None:
    key = generate_key()
    certificate = issue_ephemeral_certificate(key)
    _, enrolment = enrolment_ca()
    verify_ca(enrolment)
    assert enrolment.subject != name(CA_NAME)
    assert certificate.issuer == enrolment.subject
    certificate.verify_directly_issued_by(enrolment)
    assert common_names(certificate) == [node_id(key.public_key())]
    assert usages(certificate) == [CLIENT_AUTH]
    assert not extension(certificate, x509.BasicConstraints).ca
    assert certificate.public_key() == key.public_key()


def test_the_enrolment_ca_has_the_same_key_in_every_call_and_process() -> None:
    """Every process derives the same key: an ephemeral certificate issued by another
    process verifies in this one."""
    key, certificate = enrolment_ca()
    again_key, again_certificate = enrolment_ca()
    assert public_key_der(again_key.public_key()) == public_key_der(key.public_key())
    assert again_certificate.subject == certificate.subject
    program = (
        "from roleserve_core.identity import enrolment_ca, generate_key, public_key_der\n"
        "from roleserve_core.identity import certificate_to_pem, issue_ephemeral_certificate\n"
        "print(public_key_der(enrolment_ca()[0].public_key()).hex())\n"
        "print(certificate_to_pem(issue_ephemeral_certificate(generate_key())).decode())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False, timeout=60
    )
    assert (done.returncode, done.stderr) == (0, "")
    key_hex, pem = done.stdout.split("\n", 1)
    assert bytes.fromhex(key_hex) == public_key_der(key.public_key())
    ephemeral = certificate_from_pem(pem.encode())
    assert public_key_der(verify_ephemeral_certificate(ephemeral)) == public_key_der(
        ephemeral.public_key()
    )


# -- verification: the seven cases of Monogon's TestCertificates --------------------------


@dataclass(frozen=True)
class Pki:
    """The certificates of one case: a CA, a node's and a user's, built by hand."""

    ca: x509.Certificate
    node: x509.Certificate
    user: x509.Certificate


@dataclass(frozen=True)
class Case:
    """What is wrong in one case, and what the failed verification must say (None: the
    certificate verifies)."""

    ca_is_ca: bool = True
    node_is_ca: bool = False
    user_is_ca: bool = False
    node_dns_is_id: bool = True
    node_cn_is_id: bool = True
    user_has_cn: bool = True
    node_error: str | None = None
    user_error: str | None = None

    def build(self, cluster: Cluster) -> Pki:
        ca = Authority(cluster.ca.key, build_ca(cluster.ca.key, ca=self.ca_is_ca))
        identity = node_id(cluster.node_key.public_key())
        node = build_leaf(
            ca,
            cluster.node_key.public_key(),
            name(identity if self.node_cn_is_id else WRONG_NODE_ID),
            usages=NODE_USAGES,
            # ANY_NODE_NAME alone must not do: the node's own ID is what counts.
            dns_names=[identity if self.node_dns_is_id else ANY_NODE_NAME],
            ca=self.node_is_ca,
        )
        user = build_leaf(
            ca,
            cluster.user_key.public_key(),
            name(USER_IDENTITY if self.user_has_cn else None),
            usages=[CLIENT_AUTH],
            ca=self.user_is_ca,
        )
        return Pki(ca.certificate, node, user)


NOT_A_CA = re.escape("the CA certificate is not a CA (BasicConstraints CA:TRUE missing)")
IS_A_CA = "certificate is a CA certificate, not a leaf"


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Case(), id="0-everything-valid"),
        pytest.param(
            Case(ca_is_ca=False, node_error=NOT_A_CA, user_error=NOT_A_CA),
            id="1-ca-without-ca-true",
        ),
        pytest.param(Case(node_is_ca=True, node_error=f"node {IS_A_CA}"), id="2-node-is-a-ca"),
        pytest.param(Case(user_is_ca=True, user_error=f"user {IS_A_CA}"), id="3-user-is-a-ca"),
        pytest.param(
            Case(node_dns_is_id=False, node_error="does not name node-[0-9a-f]{32} among its DNS"),
            id="4-node-dns-name-not-its-id",
        ),
        pytest.param(
            Case(node_cn_is_id=False, node_error=f"CN '{WRONG_NODE_ID}' is not the ID of its key"),
            id="5-node-cn-not-its-id",
        ),
        pytest.param(
            Case(user_has_cn=False, user_error=re.escape("has no identity (empty CN)")),
            id="6-user-without-cn",
        ),
    ],
)
def test_reference_certificate_cases(case: Case, cluster: Cluster) -> None:
    pki = case.build(cluster)
    if case.node_error is None:
        assert verify_node_certificate(pki.node, pki.ca) == node_id(cluster.node_key.public_key())
    else:
        with pytest.raises(CertificateVerificationError, match=case.node_error):
            verify_node_certificate(pki.node, pki.ca)
    if case.user_error is None:
        assert verify_user_certificate(pki.user, pki.ca) == USER_IDENTITY
    else:
        with pytest.raises(CertificateVerificationError, match=case.user_error):
            verify_user_certificate(pki.user, pki.ca)
    # Whatever else is wrong or right: a user is never a node, a node never a user.
    with pytest.raises(CertificateVerificationError):
        verify_node_certificate(pki.user, pki.ca)
    with pytest.raises(CertificateVerificationError):
        verify_user_certificate(pki.node, pki.ca)


def test_issued_certificates_verify_and_are_told_apart(cluster: Cluster) -> None:
    ca = cluster.ca.certificate
    identity = node_id(cluster.node_key.public_key())
    assert verify_node_certificate(cluster.node_certificate, ca) == identity
    assert verify_node_certificate(cluster.node_certificate, ca, expected_id=identity) == identity
    assert verify_user_certificate(cluster.user_certificate, ca) == USER_IDENTITY
    with pytest.raises(CertificateVerificationError, match=r"not a node certificate \(no Server"):
        verify_node_certificate(cluster.user_certificate, ca)
    with pytest.raises(CertificateVerificationError, match="is a node certificate, not a user"):
        verify_user_certificate(cluster.node_certificate, ca)


@BOTH_KINDS
def test_a_certificate_of_another_clusters_ca_fails(
    kind: Kind, cluster: Cluster, other_cluster: Cluster
) -> None:
    """The other CA has the same name: only the signature tells them apart."""
    assert other_cluster.ca.certificate.subject == cluster.ca.certificate.subject
    foreign = kind.issue(other_cluster.ca, generate_key())
    with pytest.raises(CertificateVerificationError, match="not issued by this cluster's CA"):
        kind.verify(foreign, cluster.ca.certificate, now=None)


@BOTH_KINDS
def test_a_certificate_with_an_unknown_signature_algorithm_fails(
    kind: Kind, cluster: Cluster
) -> None:
    certificate = with_unknown_signature_algorithm(kind.issue(cluster.ca, generate_key()))
    with pytest.raises(CertificateVerificationError, match="not issued by this cluster's CA"):
        kind.verify(certificate, cluster.ca.certificate, now=None)


@BOTH_KINDS
@pytest.mark.parametrize(
    ("now", "error"),
    [
        pytest.param(
            WINDOW_START - SECOND, r"is not valid yet \(from 2031-02-03T04:05:06", id="early"
        ),
        pytest.param(WINDOW_START, None, id="first-second"),
        pytest.param(WINDOW_END, None, id="last-second"),
        pytest.param(WINDOW_END + SECOND, r"has expired \(on 2032-07-08T09:10:11", id="late"),
    ],
)
def test_certificates_are_valid_only_within_their_dates(
    kind: Kind, now: dt.datetime, error: str | None, cluster: Cluster
) -> None:
    key = generate_key()
    certificate = kind.issue(cluster.ca, key, not_before=WINDOW_START, not_after=WINDOW_END)
    if error is None:
        assert kind.verify(certificate, cluster.ca.certificate, now=now) == kind.identity(key)
    else:
        with pytest.raises(CertificateVerificationError, match=error):
            kind.verify(certificate, cluster.ca.certificate, now=now)


@BOTH_KINDS
@pytest.mark.parametrize(
    ("not_before", "not_after", "error"),
    [
        pytest.param(
            dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
            dt.datetime(2001, 1, 1, tzinfo=dt.UTC),
            "has expired",
            id="expired",
        ),
        pytest.param(
            dt.datetime(2098, 1, 1, tzinfo=dt.UTC),
            dt.datetime(2099, 1, 1, tzinfo=dt.UTC),
            "is not valid yet",
            id="not-yet-valid",
        ),
    ],
)
def test_without_now_verification_uses_the_current_time(
    kind: Kind, not_before: dt.datetime, not_after: dt.datetime, error: str, cluster: Cluster
) -> None:
    certificate = kind.issue(cluster.ca, generate_key(), not_before=not_before, not_after=not_after)
    with pytest.raises(CertificateVerificationError, match=error):
        kind.verify(certificate, cluster.ca.certificate, now=None)


def test_a_node_certificate_of_another_node_than_expected_fails(cluster: Cluster) -> None:
    identity = node_id(cluster.node_key.public_key())
    other = node_id(generate_key().public_key())
    with pytest.raises(
        CertificateVerificationError, match=f"is of node {identity}, not of {other}"
    ):
        verify_node_certificate(cluster.node_certificate, cluster.ca.certificate, expected_id=other)


@pytest.mark.parametrize(
    "user_usages",
    [
        pytest.param((), id="no-extended-key-usage"),
        pytest.param((ExtendedKeyUsageOID.CODE_SIGNING,), id="code-signing"),
    ],
)
def test_a_user_certificate_without_client_auth_fails(
    user_usages: Sequence[x509.ObjectIdentifier], cluster: Cluster
) -> None:
    certificate = build_leaf(
        cluster.ca, cluster.user_key.public_key(), name(USER_IDENTITY), usages=user_usages
    )
    with pytest.raises(CertificateVerificationError, match=r"no ClientAuth usage"):
        verify_user_certificate(certificate, cluster.ca.certificate)


def test_a_ca_that_may_not_sign_certificates_fails(cluster: Cluster) -> None:
    key = cluster.ca.key
    ca = build_ca(key, key_cert_sign=False)
    message = re.escape("may not sign certificates (KeyUsage keyCertSign)")
    with pytest.raises(CertificateVerificationError, match=message):
        verify_ca(ca)
    node = issue_node_certificate(key, ca, cluster.node_key.public_key())
    with pytest.raises(CertificateVerificationError, match=message):
        verify_node_certificate(node, ca)


@pytest.mark.parametrize(
    "common_name",
    [
        pytest.param("roleserve intermediate CA", id="issued-by-another-ca"),
        pytest.param(CA_NAME, id="its-own-name-but-another-signature"),
    ],
)
def test_a_ca_that_is_not_self_signed_fails(
    common_name: str, cluster: Cluster, other_cluster: Cluster
) -> None:
    ca = build_ca(cluster.ca.key, common_name=common_name, issued_by=other_cluster.ca)
    with pytest.raises(CertificateVerificationError, match="the CA certificate is not self-signed"):
        verify_ca(ca)


@pytest.mark.parametrize(
    "ca",
    [
        pytest.param(lambda: build_ca(p384_key()), id="p384"),
        pytest.param(lambda: certificate_from_pem(SECT163K1_CA_PEM), id="sect163k1"),
    ],
)
def test_a_ca_without_a_p256_key_fails(ca: Callable[[], x509.Certificate]) -> None:
    with pytest.raises(CertificateVerificationError, match="does not hold an ECDSA P-256 key"):
        verify_ca(ca())


def test_verify_ephemeral_returns_the_key_of_an_ephemeral_certificate() -> None:
    key = generate_key()
    verified = verify_ephemeral_certificate(issue_ephemeral_certificate(key))
    assert public_key_der(verified) == public_key_der(key.public_key())


def test_verify_ephemeral_refuses_a_node_certificate(cluster: Cluster) -> None:
    with pytest.raises(CertificateVerificationError, match="not issued by the enrolment CA"):
        verify_ephemeral_certificate(cluster.node_certificate)


def test_verify_ephemeral_refuses_a_cn_that_is_not_the_keys_id() -> None:
    enrolment = Authority(*enrolment_ca())
    certificate = build_leaf(
        enrolment, generate_key().public_key(), name(WRONG_NODE_ID), usages=[CLIENT_AUTH]
    )
    with pytest.raises(CertificateVerificationError, match="CN is not the ID of its key"):
        verify_ephemeral_certificate(certificate)


def test_verify_ephemeral_refuses_an_expired_one() -> None:
    certificate = issue_ephemeral_certificate(
        generate_key(), not_before=WINDOW_START, not_after=WINDOW_END
    )
    with pytest.raises(CertificateVerificationError, match="ephemeral certificate has expired"):
        verify_ephemeral_certificate(certificate, now=WINDOW_END + SECOND)


def test_an_ephemeral_certificate_is_neither_node_nor_user(cluster: Cluster) -> None:
    ephemeral = issue_ephemeral_certificate(cluster.node_key)
    with pytest.raises(CertificateVerificationError, match="not issued by this cluster's CA"):
        verify_node_certificate(ephemeral, cluster.ca.certificate)
    with pytest.raises(CertificateVerificationError, match="not issued by this cluster's CA"):
        verify_user_certificate(ephemeral, cluster.ca.certificate)


# -- credentials --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error"),
    [
        pytest.param(
            lambda c, o: NodeCredentials(o.node_key, c.node_certificate, c.ca.certificate),
            "the private key does not belong to the certificate",
            id="node-key-of-another-node",
        ),
        pytest.param(
            lambda c, o: UserCredentials(c.node_key, c.user_certificate, c.ca.certificate),
            "the private key does not belong to the certificate",
            id="user-certificate-with-another-key",
        ),
        pytest.param(
            lambda c, o: NodeCredentials(c.user_key, c.user_certificate, c.ca.certificate),
            r"not a node certificate \(no ServerAuth usage\)",
            id="user-certificate-as-node",
        ),
        pytest.param(
            lambda c, o: UserCredentials(c.node_key, c.node_certificate, c.ca.certificate),
            "is a node certificate, not a user certificate",
            id="node-certificate-as-user",
        ),
        pytest.param(
            lambda c, o: NodeCredentials(o.node_key, o.node_certificate, c.ca.certificate),
            "node certificate was not issued by this cluster's CA",
            id="node-of-another-cluster",
        ),
        pytest.param(
            lambda c, o: UserCredentials(o.user_key, o.user_certificate, c.ca.certificate),
            "user certificate was not issued by this cluster's CA",
            id="user-of-another-cluster",
        ),
        pytest.param(
            lambda c, o: NodeCredentials(c.node_key, c.node_certificate, c.node_certificate),
            "the CA certificate is not a CA",
            id="node-certificate-as-ca",
        ),
        pytest.param(
            lambda c, o: NodeCredentials(c.node_key, c.node_certificate, None),
            "node credentials need the cluster CA",
            id="node-without-ca",
        ),
        pytest.param(
            lambda c, o: UserCredentials(c.user_key, c.user_certificate, None),
            "user credentials need the cluster CA",
            id="user-without-ca",
        ),
        pytest.param(
            lambda c, o: NodeCredentials(
                c.node_key, issue_ephemeral_certificate(c.node_key), c.ca.certificate
            ),
            "not issued by this cluster's CA",
            id="ephemeral-as-node",
        ),
    ],
)
def test_credentials_that_do_not_belong_together_are_refused(
    make: Callable[[Cluster, Cluster], object],
    error: str,
    cluster: Cluster,
    other_cluster: Cluster,
) -> None:
    with pytest.raises(CredentialsError, match=error):
        make(cluster, other_cluster)


def test_credentials_know_their_node_id_and_identity(cluster: Cluster) -> None:
    node = cluster.node_credentials()
    assert node.node_id == node_id(cluster.node_key.public_key())
    assert node.node_id == verify_node_certificate(node.certificate, cluster.ca.certificate)
    assert cluster.user_credentials().identity == USER_IDENTITY


def test_save_writes_three_files_with_a_private_key_in_a_private_directory(
    cluster: Cluster, tmp_path: Path
) -> None:
    directory = tmp_path / "data" / "credentials"
    credentials = cluster.node_credentials()
    credentials.save(directory)
    # Every file in place, and no temporary file left behind.
    assert sorted(path.name for path in directory.iterdir()) == [
        CA_FILE,
        CERTIFICATE_FILE,
        KEY_FILE,
    ]
    assert mode(directory) == 0o700
    assert mode(directory / KEY_FILE) == 0o600
    assert mode(directory / CERTIFICATE_FILE) == mode(directory / CA_FILE) == 0o644
    assert (directory / KEY_FILE).read_bytes() == private_key_to_pem(cluster.node_key)
    assert (directory / CERTIFICATE_FILE).read_bytes() == certificate_to_pem(
        cluster.node_certificate
    )
    assert (directory / CA_FILE).read_bytes() == certificate_to_pem(cluster.ca.certificate)


def test_save_makes_a_world_readable_key_file_private(cluster: Cluster, tmp_path: Path) -> None:
    old = tmp_path / KEY_FILE
    old.write_bytes(private_key_to_pem(generate_key()))
    old.chmod(0o644)
    cluster.node_credentials().save(tmp_path)
    assert mode(old) == 0o600
    assert old.read_bytes() == private_key_to_pem(cluster.node_key)
    assert sorted(path.name for path in tmp_path.iterdir()) == [CA_FILE, CERTIFICATE_FILE, KEY_FILE]


@pytest.mark.parametrize(
    ("credentials", "kind"),
    [
        pytest.param(Cluster.node_credentials, NodeCredentials, id="node"),
        pytest.param(Cluster.user_credentials, UserCredentials, id="user"),
    ],
)
def test_load_returns_what_save_wrote(
    credentials: Callable[[Cluster], NodeCredentials | UserCredentials],
    kind: type[NodeCredentials | UserCredentials],
    cluster: Cluster,
    tmp_path: Path,
) -> None:
    saved = credentials(cluster)
    saved.save(tmp_path)
    loaded = kind.load(tmp_path)
    assert type(loaded) is kind
    assert loaded.key.private_numbers() == saved.key.private_numbers()
    assert loaded.certificate == saved.certificate
    assert loaded.ca_certificate == saved.ca_certificate


@dataclass(frozen=True)
class Damage:
    """A change to a saved node credentials directory, and what ``load()`` must say."""

    files: Callable[[Cluster, Cluster], dict[str, bytes | None]]
    """File name → new content (None deletes it), given this cluster and another."""
    blamed: str | None
    """The file the message must start with; None: the directory."""
    reason: str


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(Damage(lambda c, o: {KEY_FILE: None}, KEY_FILE, "is missing"), id="no-key"),
        pytest.param(
            Damage(lambda c, o: {CERTIFICATE_FILE: None}, CERTIFICATE_FILE, "is missing"),
            id="no-certificate",
        ),
        pytest.param(Damage(lambda c, o: {CA_FILE: None}, CA_FILE, "is missing"), id="no-ca"),
        pytest.param(
            Damage(lambda c, o: {KEY_FILE: b"garbage"}, KEY_FILE, "is not a PEM private key"),
            id="corrupt-key",
        ),
        pytest.param(
            Damage(
                lambda c, o: {CERTIFICATE_FILE: certificate_to_pem(c.node_certificate)[:300]},
                CERTIFICATE_FILE,
                "is not a PEM certificate",
            ),
            id="truncated-certificate",
        ),
        pytest.param(
            Damage(lambda c, o: {CA_FILE: b""}, CA_FILE, "is not a PEM certificate"),
            id="empty-ca",
        ),
        pytest.param(
            Damage(
                lambda c, o: {KEY_FILE: private_key_to_pem(o.node_key)},
                None,
                "the private key does not belong to the certificate",
            ),
            id="key-of-another-node",
        ),
        pytest.param(
            Damage(
                lambda c, o: {
                    KEY_FILE: private_key_to_pem(o.node_key),
                    CERTIFICATE_FILE: certificate_to_pem(o.node_certificate),
                },
                None,
                "the node certificate was not issued by this cluster's CA",
            ),
            id="node-of-another-cluster",
        ),
        pytest.param(
            Damage(
                lambda c, o: {
                    KEY_FILE: private_key_to_pem(c.user_key),
                    CERTIFICATE_FILE: certificate_to_pem(c.user_certificate),
                },
                None,
                "is not a node certificate",
            ),
            id="user-credentials",
        ),
        pytest.param(
            Damage(
                lambda c, o: {KEY_FILE: SECT163K1_KEY_PEM}, KEY_FILE, "is not a PEM private key"
            ),
            id="key-on-an-unsupported-curve",
        ),
        pytest.param(
            Damage(
                lambda c, o: {CERTIFICATE_FILE: SECT163K1_CA_PEM},
                None,
                "the certificate holds a key of an unsupported type",
            ),
            id="certificate-on-an-unsupported-curve",
        ),
        pytest.param(
            Damage(
                lambda c, o: {CA_FILE: SECT163K1_CA_PEM},
                None,
                "the CA certificate does not hold an ECDSA P-256 key",
            ),
            id="ca-on-an-unsupported-curve",
        ),
    ],
)
def test_load_of_damaged_credentials_names_the_file_or_directory(
    damage: Damage, cluster: Cluster, other_cluster: Cluster, tmp_path: Path
) -> None:
    cluster.node_credentials().save(tmp_path)
    for file, content in damage.files(cluster, other_cluster).items():
        if content is None:
            (tmp_path / file).unlink()
        else:
            (tmp_path / file).write_bytes(content)
    with pytest.raises(CredentialsError) as raised:
        NodeCredentials.load(tmp_path)
    blamed = tmp_path if damage.blamed is None else tmp_path / damage.blamed
    message = str(raised.value)
    assert message.startswith(f"{blamed}: " if damage.blamed is None else f"{blamed} ")
    assert damage.reason in message


@pytest.mark.parametrize("with_ca", [True, False])
def test_ephemeral_credentials_for_a_key(with_ca: bool, cluster: Cluster) -> None:
    key = generate_key()
    ca = cluster.ca.certificate if with_ca else None
    credentials = EphemeralCredentials.for_key(key, ca)
    assert credentials.key is key
    assert credentials.ca_certificate is ca
    assert credentials.ca_pem == (certificate_to_pem(ca) if ca else None)
    verified = verify_ephemeral_certificate(credentials.certificate)
    assert public_key_der(verified) == public_key_der(key.public_key())


def test_credentials_without_a_ca_are_not_saved(tmp_path: Path) -> None:
    credentials = EphemeralCredentials.for_key(generate_key(), None)
    with pytest.raises(CredentialsError, match="without a cluster CA are not saved"):
        credentials.save(tmp_path / "credentials")
    assert not (tmp_path / "credentials").exists()
