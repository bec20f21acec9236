"""Access to a cluster for its operators: user credentials plus where the cluster answers.

An access directory is a credentials directory with one more file::

    ca.pem  cert.pem  key.pem     the user's credentials (see ``identity``)
    endpoints                     host:port of curators to ask for the leader, one a line

``roleserve node run --bootstrap`` writes the owner's access directory; ``roleserve ctl``
reads one from ``--credentials DIR``, else ``$ROLESERVE_CREDENTIALS``, else the default
``$XDG_CONFIG_HOME/roleserve/owner`` (``~/.config/roleserve/owner``). The endpoints are
where ctl starts looking: it asks them for the leader and learns every other curator from
the cluster itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from roleserve_core.environment import CREDENTIALS_ENV
from roleserve_core.errors import CredentialsError
from roleserve_core.files import write_atomically
from roleserve_core.ports import CURATOR_PORT, endpoint, split_endpoint

if TYPE_CHECKING:
    # Imported where credentials are loaded: the CLI names CREDENTIALS_ENV in its --help,
    # which must not wait for cryptography.
    from roleserve_core.identity import UserCredentials

__all__ = [
    "CREDENTIALS_ENV",
    "ENDPOINTS_FILE",
    "ClusterAccess",
    "default_access_directory",
    "resolve_access_directory",
]

ENDPOINTS_FILE = "endpoints"


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


@dataclass(frozen=True)
class ClusterAccess:
    """A user's credentials and the curator endpoints to start from."""

    credentials: UserCredentials
    endpoints: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise CredentialsError("cluster access needs at least one curator endpoint")

    @classmethod
    def of(cls, credentials: UserCredentials, endpoints: Sequence[str]) -> ClusterAccess:
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
        self.credentials.save(directory)
        text = "".join(f"{line}\n" for line in self.endpoints)
        write_atomically(directory / ENDPOINTS_FILE, text.encode(), 0o644)

    @classmethod
    def load(cls, directory: Path) -> ClusterAccess:
        """Read an access directory.

        :raises CredentialsError: naming the file that is missing, corrupt or mismatched,
            and how to point at another directory.
        """
        if not directory.is_dir():
            raise CredentialsError(
                f"no cluster credentials at {directory}; pass --credentials DIR or set "
                f"{CREDENTIALS_ENV} to the directory the bootstrap printed"
            )
        try:
            from roleserve_core.identity import UserCredentials

            return cls(UserCredentials.load(directory), _read_endpoints(directory))
        except CredentialsError as exc:
            # The operator may have pointed at the wrong directory: say how to point elsewhere.
            raise CredentialsError(
                f"{exc}; pass --credentials DIR or set {CREDENTIALS_ENV} to another access "
                "directory"
            ) from None


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
