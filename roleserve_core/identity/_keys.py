"""Keys, node IDs, and PEM encoding with errors that say which file is wrong."""

from __future__ import annotations

import hashlib

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes

from roleserve_core._public import publish
from roleserve_core.errors import IdentityError
from roleserve_core.identity._names import NODE_ID_PREFIX

__all__ = [
    "NODE_ID_PREFIX",
    "PrivateKey",
    "PublicKey",
    "certificate_from_pem",
    "certificate_to_pem",
    "generate_key",
    "node_id",
    "private_key_from_pem",
    "private_key_to_pem",
    "public_key_der",
    "public_key_from_der",
]

PrivateKey = ec.EllipticCurvePrivateKey
PublicKey = ec.EllipticCurvePublicKey


def generate_key() -> PrivateKey:
    """A new ECDSA P-256 key: the one key type gRPC's TLS stack accepts for every use here
    (it refuses Ed25519 leaf certificates)."""
    return ec.generate_private_key(ec.SECP256R1())


def public_key_der(key: CertificatePublicKeyTypes) -> bytes:
    """The DER SubjectPublicKeyInfo of ``key`` (any type a certificate can hold)."""
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def public_key_from_der(data: bytes) -> PublicKey:
    """Parse a DER SubjectPublicKeyInfo holding a P-256 key.

    :raises IdentityError: if it is not one.
    """
    # UnsupportedAlgorithm (not a ValueError): a well-formed key of a type or curve that
    # cryptography cannot load, e.g. sect163k1; it is refused like any other bad input.
    try:
        key = serialization.load_der_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise IdentityError(f"not a DER public key: {exc}") from None
    return _p256_public(key, "public key")


def node_id(key: PublicKey) -> str:
    """``node-`` + the first 32 hex characters of SHA-256 over the key's DER SPKI.

    A hash, not the raw key bytes (as Monogon uses): P-256 keys start with the same DER
    header, and a hash spreads IDs evenly whatever the key encoding.
    """
    return NODE_ID_PREFIX + hashlib.sha256(public_key_der(key)).hexdigest()[:32]


def _p256_public(key: object, what: str) -> PublicKey:
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise IdentityError(f"{what} is not an ECDSA P-256 key")
    return key


def private_key_to_pem(key: PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted (the file's mode 0600 protects it)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def private_key_from_pem(data: bytes, what: str = "private key") -> PrivateKey:
    """Parse a PEM ECDSA P-256 private key.

    :param what: names the source in the error, e.g. the file path.
    :raises IdentityError: if it is not one.
    """
    # TypeError: an encrypted key; UnsupportedAlgorithm: a curve cryptography cannot load.
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise IdentityError(f"{what} is not a PEM private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise IdentityError(f"{what} is not an ECDSA P-256 private key")
    return key


def certificate_to_pem(certificate: x509.Certificate) -> bytes:
    """PEM of one certificate."""
    return certificate.public_bytes(serialization.Encoding.PEM)


def certificate_from_pem(data: bytes, what: str = "certificate") -> x509.Certificate:
    """Parse one PEM certificate.

    :param what: names the source in the error, e.g. the file path.
    :raises IdentityError: if it is not one.
    """
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise IdentityError(f"{what} is not a PEM certificate: {exc}") from None


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.identity", globals(), __all__)
