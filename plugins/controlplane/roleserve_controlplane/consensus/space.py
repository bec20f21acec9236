"""Disk space for an etcd member: what it needs, what is free, and a full disk named.

::

    require_space(directory) ── before etcd starts (the worker at its start, the member at
    │                           each start): free < needed ──▶ DiskSpaceError (retried)
    disk_full(error, directory) ── etcd exited, "no space left on device" in its last
                                   error lines ──▶ DiskSpaceError instead of EtcdExitedError

What etcd needs, measured with etcd 3.4 on tmpfs: its write-ahead log is made of segments
of ``WAL_SEGMENT_BYTES`` (64 MB, etcd's ``wal.SegmentSizeBytes``), each allocated in full
(``fallocate``) before it is written, and etcd keeps the next segment allocated ahead as a
``.tmp`` file. A new member so allocates two segments (128 MB) at once; a member restarting
from its data has its current segment already and allocates one more. ``SPACE_MARGIN`` (16
MiB) is added for what grows without preallocation: the bbolt database's first pages, a
snapshot, the TLS files, and the node's own small records. With less, etcd either cannot
start ("cannot preallocate", an exit with no hint about the disk) or dies at its first
commit, which is why the member refuses beforehand, in one line.

A member killed while running may leave its ``.tmp`` segment behind; the check does not
count it, so it asks for one segment more than strictly needed then (conservative, never
too little).

The refusal is retried, not final (``DiskSpaceError`` is a ``ResourceError``): etcd's data is
left as it is, so once space is freed the member starts at its next try (the supervisor's
backoff, at most 60 s) with nothing lost.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from roleserve_controlplane.consensus.errors import DiskSpaceError

__all__ = [
    "NO_SPACE",
    "SPACE_MARGIN",
    "WAL_SEGMENT_BYTES",
    "disk_full",
    "free_bytes",
    "needed_bytes",
    "require_space",
]

WAL_SEGMENT_BYTES = 64 * 1000 * 1000
"""etcd's write-ahead log segment, allocated in full before it is written."""

SPACE_MARGIN = 16 * 1024 * 1024
"""Free space asked for beyond the log's segments (see the module docstring)."""

NO_SPACE = "no space left on device"
"""ENOSPC as etcd (Go) writes it in its error lines."""


def needed_bytes(directory: Path) -> int:
    """Free bytes the member in ``directory`` needs before etcd starts: two log segments for
    a new member, one for a member that has its log, and ``SPACE_MARGIN``."""
    has_log = (directory / "data" / "member" / "wal").is_dir()
    return (1 if has_log else 2) * WAL_SEGMENT_BYTES + SPACE_MARGIN


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged process may still write on the filesystem of ``directory``
    (measured at its nearest existing ancestor: the member's directory may not exist yet).

    The unprivileged figure (``f_bavail``), though etcd runs as root: a filesystem's reserve
    for root is the operator's margin, not etcd's.
    """
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    stat = os.statvfs(existing)
    return stat.f_bavail * stat.f_frsize


def require_space(directory: Path) -> None:
    """Refuse to start etcd in ``directory`` without the free space it needs.

    :raises DiskSpaceError: naming the directory, the free and the needed bytes.
    """
    free, needed = free_bytes(directory), needed_bytes(directory)
    if free < needed:
        raise DiskSpaceError(
            f"not enough free space for etcd in {directory}: {_size(free)} free, "
            f"{_size(needed)} needed (etcd allocates its write-ahead log in full); free "
            "space on that filesystem and the member starts by itself",
            directory,
            free,
            needed,
        )


def disk_full(lines: Sequence[str], directory: Path) -> DiskSpaceError | None:
    """The full disk that ended etcd, if its last error ``lines`` say "no space left on
    device"; None for any other exit."""
    said = next((line for line in lines if NO_SPACE in line.lower()), None)
    if said is None:
        return None
    free, needed = free_bytes(directory), needed_bytes(directory)
    return DiskSpaceError(
        f"etcd stopped: the disk of {directory} is full ({_size(free)} free, {_size(needed)} "
        f"needed to restart); free space on that filesystem and the member restarts by "
        f"itself with its data (etcd: {said})",
        directory,
        free,
        needed,
    )


def _size(count: int) -> str:
    """``150994944 bytes (144.0 MiB)``: exact for scripts, readable for people."""
    return f"{count} bytes ({count / (1024 * 1024):.1f} MiB)"
