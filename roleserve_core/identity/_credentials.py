"""Credentials: a key, its certificate and the cluster CA, checked together, kept on disk.

A credentials directory holds three PEM files::

    ca.pem     the cluster CA certificate      0644
    cert.pem   the node or user certificate    0644
    key.pem    its private key                 0600

They are written each to a temporary file and renamed into place, so a crash never leaves
a half-written file; loading checks that the three belong together and says which file is
wrong when they do not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TypeVar

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm

from roleserve_core.errors import CertificateVerificationError, CredentialsError, IdentityError
from roleserve_core.files import write_atomically
from roleserve_core.identity._certificates import issue_ephemeral_certificate
from roleserve_core.identity._keys import (
    PrivateKey,
    certificate_from_pem,
    certificate_to_pem,
    node_id,
    private_key_from_pem,
    private_key_to_pem,
    public_key_der,
)
from roleserve_core.identity._verify import (
    verify_ca,
    verify_node_certificate,
    verify_user_certificate,
)

__all__ = [
    "CA_FILE",
    "CERTIFICATE_FILE",
    "KEY_FILE",
    "Credentials",
    "EphemeralCredentials",
    "NodeCredentials",
    "UserCredentials",
]

T = TypeVar("T")

CA_FILE = "ca.pem"
CERTIFICATE_FILE = "cert.pem"
KEY_FILE = "key.pem"


@dataclass(frozen=True)
class Credentials:
    """A private key with its certificate, and the CA of the cluster to talk to."""

    key: PrivateKey
    certificate: x509.Certificate
    ca_certificate: x509.Certificate | None
    """The cluster CA: verifies servers. None only for ephemeral credentials of a node
    that does not know its cluster's CA yet."""

    def __repr__(self) -> str:
        # Never the key; the subject says whose credentials these are.
        subject = self.certificate.subject.rfc4514_string()
        return f"{type(self).__name__}({subject})"

    def __post_init__(self) -> None:
        try:
            certificate_key = self.certificate.public_key()
        except UnsupportedAlgorithm:  # e.g. a sect163k1 key: a bad file, not a crash
            raise CredentialsError("the certificate holds a key of an unsupported type") from None
        if public_key_der(self.key.public_key()) != public_key_der(certificate_key):
            raise CredentialsError("the private key does not belong to the certificate")

    @property
    def key_pem(self) -> bytes:
        """PEM of the private key."""
        return private_key_to_pem(self.key)

    @property
    def certificate_pem(self) -> bytes:
        """PEM of the certificate."""
        return certificate_to_pem(self.certificate)

    @property
    def ca_pem(self) -> bytes | None:
        """PEM of the cluster CA certificate, if known."""
        return certificate_to_pem(self.ca_certificate) if self.ca_certificate else None

    def save(self, directory: Path) -> None:
        """Write ``ca.pem``, ``cert.pem`` and ``key.pem`` (0600) into ``directory``."""
        if self.ca_certificate is None:
            raise CredentialsError("credentials without a cluster CA are not saved")
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)  # an existing directory keeps its mode otherwise
        write_atomically(directory / CA_FILE, certificate_to_pem(self.ca_certificate), 0o644)
        write_atomically(directory / CERTIFICATE_FILE, self.certificate_pem, 0o644)
        write_atomically(directory / KEY_FILE, self.key_pem, 0o600)

    @classmethod
    def load(cls, directory: Path) -> Self:
        """Read and check the credentials saved in ``directory``.

        :raises CredentialsError: if a file is missing, corrupt, or they do not belong
            together; the message names the file.
        """
        key = _parsed(directory / KEY_FILE, private_key_from_pem)
        certificate = _parsed(directory / CERTIFICATE_FILE, certificate_from_pem)
        ca = _parsed(directory / CA_FILE, certificate_from_pem)
        try:
            return cls(key, certificate, ca)
        except CredentialsError as exc:
            raise CredentialsError(f"{directory}: {exc}") from None


class NodeCredentials(Credentials):
    """A node's key, its node certificate and the cluster CA; checked on construction."""

    ca_certificate: x509.Certificate

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ca_certificate is None:
            raise CredentialsError("node credentials need the cluster CA")
        try:
            verify_ca(self.ca_certificate)
            verify_node_certificate(self.certificate, self.ca_certificate)
        except CertificateVerificationError as exc:
            raise CredentialsError(str(exc)) from None

    @property
    def node_id(self) -> str:
        """The node's ID."""
        return node_id(self.key.public_key())


class UserCredentials(Credentials):
    """A user's key, user certificate and the cluster CA; checked on construction."""

    ca_certificate: x509.Certificate

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ca_certificate is None:
            raise CredentialsError("user credentials need the cluster CA")
        try:
            verify_ca(self.ca_certificate)
            verify_user_certificate(self.certificate, self.ca_certificate)
        except CertificateVerificationError as exc:
            raise CredentialsError(str(exc)) from None

    @property
    def identity(self) -> str:
        """The user's identity (the certificate's CN)."""
        return verify_user_certificate(self.certificate, self.ca_certificate)


class EphemeralCredentials(Credentials):
    """A key with an ephemeral certificate, for the calls that enrol a node."""

    @classmethod
    def for_key(cls, key: PrivateKey, ca_certificate: x509.Certificate | None) -> Self:
        """Ephemeral credentials for ``key``, to talk to the cluster of ``ca_certificate``."""
        return cls(key, issue_ephemeral_certificate(key), ca_certificate)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CredentialsError(f"{path} is missing") from None
    except OSError as exc:
        raise CredentialsError(f"{path} cannot be read: {exc.strerror}") from None


def _parsed(path: Path, parse: Callable[[bytes, str], T]) -> T:
    data = _read(path)
    try:
        return parse(data, str(path))
    except IdentityError as exc:
        raise CredentialsError(str(exc)) from None
