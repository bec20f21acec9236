"""Issuing certificates: the cluster CA, node and user certificates, ephemeral ones.

::

    cluster CA (self-signed, CA:TRUE, path length 0)
    ├── node certificate   CN = SAN = node ID (+ SAN ANY_NODE_NAME); ServerAuth + ClientAuth
    └── user certificate   CN = identity (e.g. "owner");             ClientAuth only;
                           its scope in an extension (``_scope``; none: owner)

    enrolment CA (derived from a published seed: anyone can issue with it)
    └── ephemeral certificate   CN = node ID of its key;             ClientAuth only

ServerAuth tells a node certificate from a user certificate: servers are always nodes.
Every key is ECDSA P-256, since gRPC's TLS stack refuses Ed25519 leaf certificates.

Why an enrolment CA instead of self-signed ephemeral certificates (as Monogon has): a node
that enrols has no certificate of the cluster yet, and proves only that it holds a key. Go's
TLS server can *request* a client certificate without verifying it; gRPC Python cannot: it
either verifies client certificates against its roots or does not ask for one at all. So
every roleserve server requires and verifies client certificates, and trusts, next to the
cluster CA, a CA whose private key is derived from a published seed. A certificate from it
proves exactly what a self-signed one would (the TLS handshake proves the key), the server
classifies it as unauthenticated, and only methods marked ``allow_unauthenticated`` accept
it.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from roleserve_core._public import publish
from roleserve_core.identity._keys import PrivateKey, PublicKey, node_id
from roleserve_core.identity._names import ANY_NODE_NAME
from roleserve_core.identity._scope import Scope, scope_extension

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

__all__ = [
    "ANY_NODE_NAME",
    "CA_NAME",
    "CLOCK_SKEW",
    "DEFAULT_VALIDITY",
    "ENROLMENT_CA_NAME",
    "create_ca",
    "enrolment_ca",
    "issue_certificate",
    "issue_ephemeral_certificate",
    "issue_node_certificate",
    "issue_user_certificate",
    "signing_request",
]

DEFAULT_VALIDITY = datetime.timedelta(days=3650)
"""Ten years, for the CAs and user certificates, which are not rotated yet. Node
certificates get the cluster's shorter lifetime from the curator (``not_after``), and
nodes renew them (``roleserve_core.workers.renewal``)."""

CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Certificates start this much in the past, so a peer whose clock lags accepts them."""

CA_NAME = "roleserve cluster CA"

ENROLMENT_CA_NAME = "roleserve enrolment CA (its key is public, not a secret)"
ENROLMENT_SEED = b"roleserve enrolment CA, version 1"
ENROLMENT_NOT_BEFORE = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
ENROLMENT_NOT_AFTER = datetime.datetime(2120, 1, 1, tzinfo=datetime.UTC)


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    """CN, and one O per organization (Kubernetes reads a client's groups from them)."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, name) for name in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(
    not_before: datetime.datetime | None, not_after: datetime.datetime | None
) -> tuple[datetime.datetime, datetime.datetime]:
    start = not_before or datetime.datetime.now(datetime.UTC) - CLOCK_SKEW
    return start, not_after or start + DEFAULT_VALIDITY


def _builder(
    subject: x509.Name,
    public_key: PublicKey,
    issuer: x509.Name,
    issuer_key: PublicKey,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
    serial: int | None = None,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(serial or x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False
        )
    )


def _leaf(
    builder: x509.CertificateBuilder, usages: list[x509.ObjectIdentifier]
) -> x509.CertificateBuilder:
    return (
        builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )


def _ca_builder(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    return builder.add_extension(
        x509.BasicConstraints(ca=True, path_length=0), critical=True
    ).add_extension(
        x509.KeyUsage(
            digital_signature=True,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=True,
            crl_sign=True,
            encipher_only=False,
            decipher_only=False,
        ),
        critical=True,
    )


def create_ca(
    key: PrivateKey,
    *,
    common_name: str = CA_NAME,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> x509.Certificate:
    """The self-signed CA certificate for ``key``; it signs leaves only.

    :param common_name: the CA's name: the cluster CA's unless given (the Kubernetes
        plugin names its CAs after what they sign for).
    """
    start, end = _validity(not_before, not_after)
    name = _name(common_name)
    builder = _builder(name, key.public_key(), name, key.public_key(), start, end)
    return _ca_builder(builder).sign(key, hashes.SHA256())


def issue_certificate(
    ca_key: PrivateKey,
    ca_certificate: x509.Certificate,
    public_key: PublicKey,
    common_name: str,
    *,
    server: bool = False,
    client: bool = True,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[IPAddress] = (),
    organizations: Sequence[str] = (),
    extensions: Sequence[x509.ExtensionType] = (),
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> x509.Certificate:
    """A leaf certificate issued by ``ca_certificate``: the one builder of every leaf.

    :param server: allow TLS server use (ServerAuth).
    :param client: allow TLS client use (ClientAuth).
    :param dns_names: DNS names of the subject alternative name.
    :param ip_addresses: IP addresses of the subject alternative name (etcd peers check
        them against the addresses they dial).
    :param organizations: the subject's O attributes (Kubernetes: the client's groups,
        e.g. ``system:masters``).
    """
    if not common_name:
        raise ValueError("a certificate needs a common name")
    start, end = _validity(not_before, not_after)
    builder = _builder(
        _name(common_name, organizations),
        public_key,
        ca_certificate.subject,
        ca_key.public_key(),
        start,
        end,
    )
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(address) for address in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    return _leaf(builder, usages).sign(ca_key, hashes.SHA256())


def issue_node_certificate(
    ca_key: PrivateKey,
    ca_certificate: x509.Certificate,
    public_key: PublicKey,
    *,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> x509.Certificate:
    """A node certificate for ``public_key``: CN and DNS name = its node ID."""
    identity = node_id(public_key)
    return issue_certificate(
        ca_key,
        ca_certificate,
        public_key,
        identity,
        server=True,
        dns_names=(identity, ANY_NODE_NAME),
        not_before=not_before,
        not_after=not_after,
    )


def issue_user_certificate(
    ca_key: PrivateKey,
    ca_certificate: x509.Certificate,
    public_key: PublicKey,
    identity: str,
    *,
    scope: Scope | None = None,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> x509.Certificate:
    """A user certificate for ``public_key``: CN = ``identity``, client use only.

    :param scope: what its holder may do, carried in the scope extension (see ``_scope``);
        None: no extension, which is an owner certificate.
    """
    if not identity:
        raise ValueError("a user certificate needs an identity")
    return issue_certificate(
        ca_key,
        ca_certificate,
        public_key,
        identity,
        extensions=[scope_extension(scope)] if scope is not None else [],
        not_before=not_before,
        not_after=not_after,
    )


@functools.cache
def enrolment_ca() -> tuple[PrivateKey, x509.Certificate]:
    """The enrolment CA: its key derives from a published seed, so anyone can issue
    ephemeral certificates, and every process computes the same key.

    The certificate's bytes differ between processes (ECDSA signatures are randomised),
    but name and key are the same, which is all chain verification looks at.
    """
    secret = int.from_bytes(hashlib.sha256(ENROLMENT_SEED).digest(), "big")
    key = ec.derive_private_key(secret, ec.SECP256R1())
    name = _name(ENROLMENT_CA_NAME)
    builder = _builder(
        name,
        key.public_key(),
        name,
        key.public_key(),
        ENROLMENT_NOT_BEFORE,
        ENROLMENT_NOT_AFTER,
        serial=1,
    )
    return key, _ca_builder(builder).sign(key, hashes.SHA256())


def issue_ephemeral_certificate(
    key: PrivateKey,
    *,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> x509.Certificate:
    """A certificate that proves only the holding of ``key``, for enrolment calls.

    Issued by the enrolment CA; CN = the node ID of ``key``.
    """
    ca_key, ca_certificate = enrolment_ca()
    return issue_certificate(
        ca_key,
        ca_certificate,
        key.public_key(),
        node_id(key.public_key()),
        not_before=not_before,
        not_after=not_after,
    )


def signing_request(key: PrivateKey, common_name: str) -> bytes:
    """DER of a PKCS#10 request for ``key``, signed by it: how a user asks the curator for
    a certificate without the key leaving its machine (the curator names the certificate,
    whatever ``common_name`` says; the signature is what it checks)."""
    request = x509.CertificateSigningRequestBuilder().subject_name(_name(common_name))
    return request.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.identity", globals(), __all__)
