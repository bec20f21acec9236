"""Writing files that must never be seen half-written, with the mode and owner they need;
and a full disk, met while writing, named in one line.

::

    write_atomically(path, data) ── temporary file, fsync, rename, fsync the directory
    with naming_full_disk(path): ... ── ENOSPC / EDQUOT ──▶ DiskFullError (a ResourceError):
        "no space left on the filesystem mounted at M (writing P): free space there; ..."

A full disk is a refusal of the environment, not a bug: the supervisor logs a
``ResourceError`` as one ERROR line (``waiting for the operator: ...``), never a traceback,
and restarts the runnable after its backoff, so the node goes on by itself once space is
freed. The OSError of a ``write()`` names no file, hence ``naming_full_disk`` at the places
that write: ``write_atomically``, the program runner's records, a plugin's own files. An
ENOSPC that escapes them still counts as a full disk (``disk_full_error``, which the
supervisor applies to any failure), named by the path the OSError has, if any.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from roleserve_core.errors import ResourceError

__all__ = [
    "DISK_FULL_ERRNOS",
    "NEW_FILE_MODE",
    "DiskFullError",
    "disk_full_error",
    "naming_full_disk",
    "write_atomically",
]

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errors of a write that met a full filesystem (or the user's quota on it)."""


class DiskFullError(ResourceError, OSError):
    """A write failed for want of space: one line naming the path, the filesystem it is on
    and what to do (see the module docstring).

    Also an ``OSError`` with the cause's ``errno``, ``strerror`` and file name: code that
    caught the ``OSError`` of ``write_atomically`` before it raised this (a plugin's own
    ``except OSError``, which the plugin API promise keeps working) still catches it.
    """

    def __init__(self, path: Path | None, cause: OSError) -> None:
        self.path = path
        self.mount = _mount_point(path) if path is not None else None
        reason = cause.strerror or str(cause)
        if path is None:
            where = "a filesystem of this node is full"
        else:
            where = f"no space left on the filesystem mounted at {self.mount} (writing {path})"
        super().__init__(f"{where}: {reason}; free space there, and this starts again by itself")
        self.errno = cause.errno
        self.strerror = cause.strerror
        self.filename = os.fspath(path) if path is not None else cause.filename

    def __str__(self) -> str:
        """The one line (OSError's own would be ``[Errno 28] …: 'path'``)."""
        return str(self.args[0])


def disk_full_error(error: BaseException, path: Path | str | None = None) -> DiskFullError | None:
    """``error`` as a ``DiskFullError`` if it is an OSError of a full disk (else None),
    naming ``path``, or the file the OSError names."""
    if isinstance(error, DiskFullError):
        return error
    if not isinstance(error, OSError) or error.errno not in DISK_FULL_ERRNOS:
        return None
    named = path if path is not None else error.filename
    return DiskFullError(Path(os.fsdecode(named)) if named is not None else None, error)


@contextlib.contextmanager
def naming_full_disk(path: Path | str) -> Iterator[None]:
    """Turn a full disk met in the block (writing ``path``) into a ``DiskFullError``."""
    try:
        yield
    except OSError as exc:
        full = disk_full_error(exc, path)
        if full is None:
            raise
        raise full from exc


def _mount_point(path: Path) -> Path:
    """The mount point of the filesystem ``path`` is on (of its nearest existing parent)."""
    current = Path(os.path.abspath(path))
    while not current.exists() and current != current.parent:
        current = current.parent
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return current


NEW_FILE_MODE = 0o644
"""The mode of a file created where there was none, unless told otherwise."""


def write_atomically(
    path: Path, data: bytes, mode: int | None = NEW_FILE_MODE, *, keep_owner: bool = False
) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place.

    A crash leaves either the old file or the new one, never a mix: the data is on disk
    (fsync) before the rename, and the rename is on disk (the directory fsynced) before
    this returns. A failure removes the temporary file and leaves the old file untouched.

    :param mode: the file's mode, even if it existed with another (a key file once 0644
        becomes 0600); None keeps the existing file's mode (0644 for a new file).
    :param keep_owner: give the new file the existing file's owner and group (a system
        file such as ``/etc/hosts`` rewritten by root keeps whoever owned it).
    :raises DiskFullError: if the filesystem is full.
    :raises OSError: if any other step fails.
    """
    with naming_full_disk(path):
        _write_atomically(path, data, mode, keep_owner=keep_owner)


def _write_atomically(path: Path, data: bytes, mode: int | None, *, keep_owner: bool) -> None:
    try:
        old: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        old = None
    if mode is None:
        mode = stat.S_IMODE(old.st_mode) if old is not None else NEW_FILE_MODE
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with open(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            if keep_owner and old is not None:
                os.fchown(descriptor, old.st_uid, old.st_gid)  # before chmod: clears set-id bits
            os.fchmod(descriptor, mode)
            os.fsync(descriptor)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable: fsync the directory that holds the entry."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
