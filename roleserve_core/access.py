"""Access to a cluster for its operators: user credentials plus where the cluster answers.

An access directory is a credentials directory with one more file::

    ca.pem  cert.pem  key.pem     the user's credentials (see ``identity``)
    endpoints                     host:port of curators to ask for the leader, one a line
    checked                       what ``load`` last checked (written by it, best effort)
    leader                        the leader ``ctl`` last found (``cli.ctl._last_leader``)

``roleserve node run --bootstrap`` writes the owner's access directory; ``roleserve ctl``
reads one from ``--credentials DIR``, else ``$ROLESERVE_CREDENTIALS``, else the default
``$XDG_CONFIG_HOME/roleserve/owner`` (``~/.config/roleserve/owner``). The endpoints are
where ctl starts looking: it asks them for the leader and learns every other curator from
the cluster itself.

Loading reads the credentials as PEM, which is all a connection presents; checking that
they belong together and are valid needs cryptography, whose import costs a ``ctl`` run
more than its calls. So ``load`` checks them only when their content differs from what it
last checked there, or the certificate expired since (file ``checked``: the SHA-256 of the
three files, and when the certificate expires), and bad credentials still get the check's
one-line error naming the file. ``ClusterAccess.credentials`` parses them on first use.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from roleserve_core.environment import CREDENTIALS_ENV
from roleserve_core.errors import CredentialsError
from roleserve_core.files import write_atomically
from roleserve_core.identity import PemCredentials, TlsCredentials
from roleserve_core.ports import CURATOR_PORT, endpoint, split_endpoint

if TYPE_CHECKING:
    # Imported where credentials are parsed: cryptography (see the module's docstring).
    from roleserve_core.identity import UserCredentials

__all__ = [
    "CHECKED_FILE",
    "CREDENTIALS_ENV",
    "ENDPOINTS_FILE",
    "ClusterAccess",
    "checked_credentials",
    "default_access_directory",
    "resolve_access_directory",
]

ENDPOINTS_FILE = "endpoints"
CHECKED_FILE = "checked"


def default_access_directory(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/roleserve/owner``, or ``~/.config/roleserve/owner``."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "roleserve" / "owner"


def resolve_access_directory(
    flag: str | Path | None, environ: Mapping[str, str] | None = None
) -> Path:
    """The access directory to use: the flag, else ``$ROLESERVE_CREDENTIALS``, else the
    default."""
    environ = os.environ if environ is None else environ
    if flag:
        return Path(flag).expanduser()
    if environ.get(CREDENTIALS_ENV):
        return Path(environ[CREDENTIALS_ENV]).expanduser()
    return default_access_directory(environ)


@dataclass(frozen=True, init=False)
class ClusterAccess:
    """A user's credentials and the curator endpoints to start from."""

    tls: TlsCredentials
    """The credentials as connections present them: the PEM as read (``load``), or the
    ``UserCredentials`` given."""
    endpoints: tuple[str, ...]

    def __init__(self, credentials: TlsCredentials, endpoints: tuple[str, ...]) -> None:
        """:param credentials: checked (``UserCredentials``), or PEM already checked
        (``checked_credentials``'s)."""
        object.__setattr__(self, "tls", credentials)
        object.__setattr__(self, "endpoints", endpoints)
        if not self.endpoints:
            raise CredentialsError("cluster access needs at least one curator endpoint")

    @functools.cached_property
    def credentials(self) -> UserCredentials:
        """The user credentials, parsed on first use (cryptography)."""
        from roleserve_core.identity import UserCredentials

        if isinstance(self.tls, UserCredentials):
            return self.tls
        return UserCredentials.from_pem(PemCredentials.of(self.tls))

    @classmethod
    def of(cls, credentials: TlsCredentials, endpoints: Sequence[str]) -> ClusterAccess:
        """Access with ``endpoints`` normalised to ``host:port`` (default port 7835).

        :raises CredentialsError: if an endpoint is not ``HOST[:PORT]``, or there is none.
        """
        try:
            normalised = _normalised(endpoints)
        except ValueError as exc:
            raise CredentialsError(f"curator endpoint {exc}") from None
        return cls(credentials, normalised)

    def save(self, directory: Path) -> None:
        """Write the credentials and the endpoints file into ``directory`` (0700)."""
        PemCredentials.of(self.tls).save(directory)
        text = "".join(f"{line}\n" for line in self.endpoints)
        write_atomically(directory / ENDPOINTS_FILE, text.encode(), 0o644)

    @classmethod
    def load(cls, directory: Path) -> ClusterAccess:
        """Read an access directory; check its credentials if they changed since the last
        check (``checked_credentials``).

        :raises CredentialsError: naming the file that is missing, corrupt or mismatched,
            and how to point at another directory.
        """
        if not directory.is_dir():
            raise CredentialsError(
                f"no cluster credentials at {directory}; pass --credentials DIR or set "
                f"{CREDENTIALS_ENV} to the directory the bootstrap printed"
            )
        try:
            return cls(checked_credentials(directory), _read_endpoints(directory))
        except CredentialsError as exc:
            # The operator may have pointed at the wrong directory: say how to point elsewhere.
            raise CredentialsError(
                f"{exc}; pass --credentials DIR or set {CREDENTIALS_ENV} to another access "
                "directory"
            ) from None


def checked_credentials(directory: Path) -> PemCredentials:
    """The user credentials of ``directory`` as PEM, checked as ``UserCredentials.load``
    checks them unless that check passed on the same content and the certificate has not
    expired since (file ``checked``, rewritten after each check, best effort).

    :raises CredentialsError: naming the file that is missing, corrupt or mismatched.
    """
    pem = PemCredentials.read(directory)
    digest = _digest(pem)
    if _passed(directory, digest):
        return pem
    from roleserve_core.identity import UserCredentials

    credentials = UserCredentials.from_pem(pem)
    expires = credentials.certificate.not_valid_after_utc.timestamp()
    with contextlib.suppress(OSError):
        write_atomically(directory / CHECKED_FILE, f"{digest} {expires:.0f}\n".encode(), 0o600)
    return pem


def _digest(pem: PemCredentials) -> str:
    """SHA-256 of the three files, each preceded by its length (no two contents alike)."""
    hashed = hashlib.sha256()
    for data in (pem.key_pem, pem.certificate_pem, pem.ca_pem):
        hashed.update(len(data).to_bytes(8, "big"))
        hashed.update(data)
    return hashed.hexdigest()


def _passed(directory: Path, digest: str) -> bool:
    """Whether ``checked`` records a check of content ``digest`` whose certificate is still
    valid; anything else (missing, unreadable, malformed) is no."""
    try:
        words = (directory / CHECKED_FILE).read_text(encoding="ascii").split()
        checked, expires = words[0], float(words[1])
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        return False
    return len(words) == 2 and checked == digest and time.time() < expires


def _normalised(endpoints: Sequence[str]) -> tuple[str, ...]:
    """``host:port`` of each endpoint, duplicates dropped.

    :raises ValueError: naming an endpoint that is not ``HOST[:PORT]``.
    """
    normalised = [endpoint(*split_endpoint(text, CURATOR_PORT)) for text in endpoints]
    return tuple(dict.fromkeys(normalised))


def _read_endpoints(directory: Path) -> tuple[str, ...]:
    """The endpoints file of an access directory, normalised.

    :raises CredentialsError: naming the file, if it is missing, unreadable, empty or holds
        something that is not ``HOST[:PORT]``.
    """
    path = directory / ENDPOINTS_FILE
    try:
        lines = path.read_text().split()
    except FileNotFoundError:
        raise CredentialsError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"{path} cannot be read: {exc}") from None
    if not lines:
        raise CredentialsError(f"{path} names no curator endpoint")
    try:
        return _normalised(lines)
    except ValueError as exc:
        raise CredentialsError(f"{path}: curator endpoint {exc}") from None
