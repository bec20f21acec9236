"""Verifying certificates: is this the cluster CA, a node of it, a user of it?

Each check raises ``CertificateVerificationError`` naming what failed, so a refused peer
or a corrupt file gets an error an operator can act on. The checks, after Monogon's
``identity`` package:

- CA: a P-256 key, CA:TRUE, may sign certificates, signed by itself.
- issued leaf: issued and signed by the CA, currently valid, not a CA, a P-256 key.
- node: an issued leaf with ServerAuth, CN = node ID of its key, that ID among its DNS
  names (and, if asked, equal to an expected ID).
- user: an issued leaf with ClientAuth and without ServerAuth, and a non-empty CN.

ServerAuth is what tells the two apart, so a user certificate never verifies as a node's
and a node certificate never as a user's.
"""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from roleserve_core._public import publish
from roleserve_core.errors import CertificateVerificationError
from roleserve_core.identity._certificates import enrolment_ca
from roleserve_core.identity._keys import PublicKey, node_id

__all__ = [
    "verify_ca",
    "verify_ephemeral_certificate",
    "verify_node_certificate",
    "verify_user_certificate",
]


def _fail(message: str) -> CertificateVerificationError:
    return CertificateVerificationError(message)


def _common_name(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else ""
    return value if isinstance(value, str) else value.decode()


def _p256(certificate: x509.Certificate, what: str) -> PublicKey:
    try:
        key = certificate.public_key()
    except UnsupportedAlgorithm:  # e.g. a sect163k1 key: refused, not an unexpected error
        raise _fail(f"{what} does not hold an ECDSA P-256 key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise _fail(f"{what} does not hold an ECDSA P-256 key")
    return key


def _extension(certificate: x509.Certificate, kind: type[x509.ExtensionType]) -> object | None:
    try:
        return certificate.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def _is_ca(certificate: x509.Certificate) -> bool:
    constraints = _extension(certificate, x509.BasicConstraints)
    return isinstance(constraints, x509.BasicConstraints) and constraints.ca


def _usages(certificate: x509.Certificate) -> set[x509.ObjectIdentifier]:
    usages = _extension(certificate, x509.ExtendedKeyUsage)
    return set(usages) if isinstance(usages, x509.ExtendedKeyUsage) else set()


def _signed_by(certificate: x509.Certificate, issuer_key: PublicKey) -> bool:
    try:
        algorithm = certificate.signature_hash_algorithm
    except UnsupportedAlgorithm:  # a signature algorithm cryptography does not know
        return False
    if algorithm is None:
        return False
    try:
        issuer_key.verify(
            certificate.signature, certificate.tbs_certificate_bytes, ec.ECDSA(algorithm)
        )
    except InvalidSignature:
        return False
    return True


def verify_ca(certificate: x509.Certificate) -> None:
    """Check that ``certificate`` can be a cluster CA.

    :raises CertificateVerificationError: naming the failed check.
    """
    key = _p256(certificate, "the CA certificate")
    if not _is_ca(certificate):
        raise _fail("the CA certificate is not a CA (BasicConstraints CA:TRUE missing)")
    usage = _extension(certificate, x509.KeyUsage)
    if isinstance(usage, x509.KeyUsage) and not usage.key_cert_sign:
        raise _fail("the CA certificate may not sign certificates (KeyUsage keyCertSign)")
    if certificate.issuer != certificate.subject or not _signed_by(certificate, key):
        raise _fail("the CA certificate is not self-signed")


def _verify_issued(
    certificate: x509.Certificate,
    ca: x509.Certificate,
    what: str,
    now: datetime.datetime | None,
    issuer: str = "this cluster's CA",
) -> PublicKey:
    if certificate.issuer != ca.subject or not _signed_by(certificate, _p256(ca, "the CA")):
        raise _fail(f"{what} was not issued by {issuer}")
    moment = now or datetime.datetime.now(datetime.UTC)
    if moment < certificate.not_valid_before_utc:
        start = certificate.not_valid_before_utc.isoformat()
        raise _fail(f"{what} is not valid yet (from {start})")
    if moment > certificate.not_valid_after_utc:
        raise _fail(f"{what} has expired (on {certificate.not_valid_after_utc.isoformat()})")
    if _is_ca(certificate):
        raise _fail(f"{what} is a CA certificate, not a leaf")
    return _p256(certificate, what)


def verify_node_certificate(
    certificate: x509.Certificate,
    ca: x509.Certificate,
    *,
    expected_id: str | None = None,
    now: datetime.datetime | None = None,
) -> str:
    """Check that ``certificate`` is a node certificate of the cluster of ``ca``.

    :param expected_id: also require this node ID.
    :returns: the node ID.
    :raises CertificateVerificationError: naming the failed check.
    """
    verify_ca(ca)
    key = _verify_issued(certificate, ca, "the node certificate", now)
    if ExtendedKeyUsageOID.SERVER_AUTH not in _usages(certificate):
        raise _fail("the certificate is not a node certificate (no ServerAuth usage)")
    identity = node_id(key)
    if _common_name(certificate) != identity:
        raise _fail(
            f"the node certificate's CN {_common_name(certificate)!r} is not the ID of its "
            f"key, {identity}"
        )
    names = _extension(certificate, x509.SubjectAlternativeName)
    dns = (
        names.get_values_for_type(x509.DNSName)
        if isinstance(names, x509.SubjectAlternativeName)
        else []
    )
    if identity not in dns:
        raise _fail(f"the node certificate does not name {identity} among its DNS names")
    if expected_id is not None and identity != expected_id:
        raise _fail(f"the certificate is of node {identity}, not of {expected_id}")
    return identity


def verify_user_certificate(
    certificate: x509.Certificate,
    ca: x509.Certificate,
    *,
    now: datetime.datetime | None = None,
) -> str:
    """Check that ``certificate`` is a user certificate of the cluster of ``ca``.

    :returns: the user's identity (the CN).
    :raises CertificateVerificationError: naming the failed check.
    """
    verify_ca(ca)
    _verify_issued(certificate, ca, "the user certificate", now)
    usages = _usages(certificate)
    if ExtendedKeyUsageOID.SERVER_AUTH in usages:
        raise _fail("the certificate is a node certificate, not a user certificate")
    if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        raise _fail("the user certificate may not be used by clients (no ClientAuth usage)")
    identity = _common_name(certificate)
    if not identity:
        raise _fail("the user certificate has no identity (empty CN)")
    return identity


def verify_ephemeral_certificate(
    certificate: x509.Certificate, *, now: datetime.datetime | None = None
) -> PublicKey:
    """Check that ``certificate`` is an ephemeral certificate (from the enrolment CA).

    :returns: its public key: all such a certificate proves is that the peer holds it.
    :raises CertificateVerificationError: naming the failed check.
    """
    _, enrolment = enrolment_ca()
    key = _verify_issued(
        certificate, enrolment, "the ephemeral certificate", now, issuer="the enrolment CA"
    )
    if _common_name(certificate) != node_id(key):
        raise _fail("the ephemeral certificate's CN is not the ID of its key")
    return key


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.identity", globals(), __all__)
