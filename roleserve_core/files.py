"""Writing files that must never be seen half-written, with the mode and owner they need."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["NEW_FILE_MODE", "write_atomically"]

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
    :raises OSError: if any step fails.
    """
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
