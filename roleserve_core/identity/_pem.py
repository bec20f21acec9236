"""Credentials as their files hold them: three PEM texts, read but not parsed.

What a TLS connection presents is the PEM itself (gRPC parses it): a client that only
connects (``roleserve ctl``) reads the files and hands them over, without importing
cryptography, which costs more than the rest of its calls. Checking that the three belong
together is ``Credentials``' (``Credentials.from_pem``); ``access`` does it once per content
of an access directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Self

from roleserve_core._public import publish
from roleserve_core.errors import CredentialsError
from roleserve_core.files import write_atomically

__all__ = ["CA_FILE", "CERTIFICATE_FILE", "KEY_FILE", "PemCredentials", "TlsCredentials"]

CA_FILE = "ca.pem"
CERTIFICATE_FILE = "cert.pem"
KEY_FILE = "key.pem"


class TlsCredentials(Protocol):
    """What a TLS client presents, as PEM: ``PemCredentials``, or parsed ``Credentials``."""

    @property
    def key_pem(self) -> bytes: ...

    @property
    def certificate_pem(self) -> bytes: ...

    @property
    def ca_pem(self) -> bytes | None: ...


@dataclass(frozen=True)
class PemCredentials:
    """A key, its certificate and the cluster CA, as PEM, unchecked."""

    key_pem: bytes
    certificate_pem: bytes
    ca_pem: bytes
    directory: Path | None = None
    """Where they were read from, to name the files when they are parsed."""

    def __repr__(self) -> str:
        # Never the key.
        return f"{type(self).__name__}({self.directory})"

    @classmethod
    def of(cls, credentials: TlsCredentials) -> Self:
        """The PEM of ``credentials``.

        :raises CredentialsError: if they carry no cluster CA (ephemeral credentials).
        """
        if credentials.ca_pem is None:
            raise CredentialsError("credentials without a cluster CA are not saved")
        if isinstance(credentials, cls):
            return credentials
        return cls(credentials.key_pem, credentials.certificate_pem, credentials.ca_pem)

    @classmethod
    def read(cls, directory: Path) -> Self:
        """The three files of ``directory``, as they are.

        :raises CredentialsError: naming the file that is missing or cannot be read.
        """
        key, certificate, ca = (_read(directory / name) for name in PEM_FILES)
        return cls(key, certificate, ca, directory)

    def save(self, directory: Path) -> None:
        """Write ``ca.pem``, ``cert.pem`` and ``key.pem`` (0600) into ``directory`` (0700),
        each to a temporary file renamed into place."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)  # an existing directory keeps its mode otherwise
        write_atomically(directory / CA_FILE, self.ca_pem, 0o644)
        write_atomically(directory / CERTIFICATE_FILE, self.certificate_pem, 0o644)
        write_atomically(directory / KEY_FILE, self.key_pem, 0o600)


PEM_FILES = (KEY_FILE, CERTIFICATE_FILE, CA_FILE)
"""The files in the order ``read`` reads them, and so reports the first missing one."""


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CredentialsError(f"{path} is missing") from None
    except OSError as exc:
        raise CredentialsError(f"{path} cannot be read: {exc.strerror}") from None


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.identity", globals(), __all__)
