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

from roleserve_core._public import publish
from roleserve_core.errors import CertificateVerificationError, CredentialsError, IdentityError
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
from roleserve_core.identity._pem import CA_FILE, CERTIFICATE_FILE, KEY_FILE, PemCredentials
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
        PemCredentials.of(self).save(directory)

    @classmethod
    def load(cls, directory: Path) -> Self:
        """Read and check the credentials saved in ``directory``.

        :raises CredentialsError: if a file is missing, corrupt, or they do not belong
            together; the message names the file.
        """
        return cls.from_pem(PemCredentials.read(directory))

    @classmethod
    def from_pem(cls, pem: PemCredentials) -> Self:
        """Parse and check ``pem`` (``PemCredentials.read``'s).

        :raises CredentialsError: if a file is corrupt, or they do not belong together;
            the message names the file (or the directory).
        """
        directory = pem.directory or Path()
        key = _parsed(directory / KEY_FILE, pem.key_pem, private_key_from_pem)
        certificate = _parsed(
            directory / CERTIFICATE_FILE, pem.certificate_pem, certificate_from_pem
        )
        ca = _parsed(directory / CA_FILE, pem.ca_pem, certificate_from_pem)
        try:
            return cls(key, certificate, ca)
        except CredentialsError as exc:
            if pem.directory is None:
                raise
            raise CredentialsError(f"{pem.directory}: {exc}") from None


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


def _parsed(path: Path, data: bytes, parse: Callable[[bytes, str], T]) -> T:
    try:
        return parse(data, str(path))
    except IdentityError as exc:
        raise CredentialsError(str(exc)) from None


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.identity", globals(), __all__)
