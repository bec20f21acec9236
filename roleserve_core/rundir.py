"""A node's runtime directory: where its unix sockets live, whatever its data directory.

A unix socket's path is limited (108 bytes with the NUL in ``sun_path``; Go programs
refuse 108, containerd refuses more than 104), and the programs a node runs add suffixes
of their own (containerd listens on ``<socket>.ttrpc`` too). A data directory may be
as deep as its operator likes (a pytest temporary directory is ~100 bytes), so no socket
goes there: each goes under a short directory of the node's own::

    /run/roleserve/                 the runtime root (``runtime_root``), 0700
    └── <key>/                      one node: node_runtime_dir(data_dir), 0700
        └── <plugin>/               NodeContext.runtime_dir, 0700
            └── containerd.sock     (the kubernetes plugin's, for one)

The key is the first 12 hex digits of the SHA-256 of the data directory's resolved path:
short whatever the path's length, the same at each start of the node (its data directory
does not move), and another for each node of a local cluster on one machine (each has a
directory of its own). The node ID is not the key: it is long, and it is known only once
the node is enrolled.

The root is ``/run/roleserve`` for root (the node runs as root); for another user, who
cannot write ``/run``, ``$XDG_RUNTIME_DIR/roleserve``, or ``/tmp/roleserve-<uid>`` without
that variable. Everything is 0700 and must be the node's own: the sockets (containerd's
above all) are the node's control, not for other users to reach. The node creates its
directories before any worker starts and removes them when it stops (a program it ran
that crashed leaves a socket its next start replaces, as containerd and wireguard-go
replace theirs). ``roleserve ctl``, tests and the docs find the sockets through the same
function.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
from pathlib import Path

from roleserve_core.environment import RUNTIME_DIR_ENV
from roleserve_core.errors import RuntimeDirectoryError

__all__ = [
    "KEY_LENGTH",
    "SYSTEM_RUNTIME_ROOT",
    "make_runtime_dir",
    "mount_points",
    "mount_points_under",
    "node_runtime_dir",
    "remove_runtime_dir",
    "runtime_key",
    "runtime_root",
]

SYSTEM_RUNTIME_ROOT = Path("/run/roleserve")
"""The runtime root of nodes run by root."""

KEY_LENGTH = 12
"""Hex digits of a node's key: 48 bits, no collision among the nodes of one machine."""

MODE = 0o700


def runtime_root() -> Path:
    """The directory holding the runtime directories of this user's nodes (module
    docstring)."""
    uid = os.geteuid()
    if uid == 0:
        return SYSTEM_RUNTIME_ROOT
    xdg = os.environ.get(RUNTIME_DIR_ENV, "")
    if os.path.isabs(xdg):
        return Path(xdg) / "roleserve"
    return Path(f"/tmp/roleserve-{uid}")


def runtime_key(data_dir: Path | str) -> str:
    """The node's key: a short hash of its data directory's resolved path."""
    resolved = os.fsencode(Path(data_dir).resolve())
    return hashlib.sha256(resolved).hexdigest()[:KEY_LENGTH]


def node_runtime_dir(data_dir: Path | str) -> Path:
    """The runtime directory of the node whose data directory is ``data_dir``: where its
    unix sockets are. A plugin's own is ``NodeContext.runtime_dir``, a directory in it.

    Pure: creates nothing (``make_runtime_dir`` does), so ``roleserve ctl`` and tests call
    it to find a node's sockets.
    """
    return runtime_root() / runtime_key(data_dir)


def make_runtime_dir(path: Path) -> Path:
    """Create ``path`` (and any missing parent up from the runtime root), 0700; returns it.

    An existing directory of ours is kept as it is, made 0700 if it was not.

    :raises RuntimeDirectoryError: one line naming the directory, if it cannot be made or
        belongs to another user (a directory planted in ``/tmp``).
    """
    root = runtime_root()
    missing = [path, *(parent for parent in path.parents if parent.is_relative_to(root))]
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=MODE, exist_ok=True)
            _check_ours(directory)
        except OSError as exc:
            raise RuntimeDirectoryError(
                f"cannot make the runtime directory {directory}: {exc.strerror or exc}"
            ) from None
    return path


def _check_ours(directory: Path) -> None:
    """``directory`` is a directory of this user's (not a symlink), 0700 from now on."""
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise RuntimeDirectoryError(
            f"the runtime directory {directory} is not a directory of user {os.geteuid()}; "
            f"remove it, or set {RUNTIME_DIR_ENV} to a directory of your own"
        )
    if stat.S_IMODE(info.st_mode) != MODE:
        directory.chmod(MODE)


def remove_runtime_dir(path: Path) -> list[Path]:
    """Remove ``path`` and what is in it (the sockets of programs that have stopped); the
    runtime root stays, for the machine's other nodes. Nothing there is an error.

    A mount point at or under ``path`` (the kubelet's root directory is mounted there)
    keeps the whole directory: removing through it would remove the files it shows,
    which live elsewhere (the data directory). The next start of the node finds it.

    :returns: the mount points that kept it (none: it is gone).
    """
    kept = mount_points_under(path)
    if not kept:
        shutil.rmtree(path, ignore_errors=True)
    return kept


def mount_points(mountinfo: str | None = None) -> list[Path]:
    """Every mount point of this process's mount namespace, unescaped.

    :param mountinfo: the text of a mountinfo file; None: ``/proc/self/mountinfo``'s (no
        such file: none).
    """
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    rows = (line.split(" ") for line in mountinfo.splitlines())
    return [Path(_unescape(fields[4])) for fields in rows if len(fields) > 4]


def mount_points_under(path: Path, mountinfo: str | None = None) -> list[Path]:
    """The mount points at or under ``path`` (``mount_points``' ``mountinfo``)."""
    root = str(path).rstrip("/")
    return [
        point
        for point in mount_points(mountinfo)
        if str(point) == root or str(point).startswith(root + "/")
    ]


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are octal escapes there."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)
