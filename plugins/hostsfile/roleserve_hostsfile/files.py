"""Reading and replacing the files the worker keeps, never leaving one half-written.

::

    read_file(path) ─▶ bytes, or None if there is none
    update_hosts_file(path, block):  read ─▶ merge_block ─▶ same bytes? ─▶ nothing written
                                                        └─ else ─▶ replace_file
    replace_file(path, data):  roleserve_core.files.write_atomically, keeping the owner and
                               (unless told) the mode: temporary file in the same directory
                               ─▶ write, chown, chmod, fsync ─▶ rename ─▶ fsync the directory

The rename is the only thing that changes ``path``: a reader (or a crash) sees the old file
or the new one, never a mix or an empty file, and a failure at any step removes the
temporary file and leaves the old one as it was. Every ``OSError`` becomes one
``FileUpdateError`` naming the path and the reason.

A hosts file is the operator's: its mode and owner (uid and gid) stay as they were.

A symbolic link at ``path`` is followed: its target is replaced and the link stays.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from roleserve_core import write_atomically
from roleserve_hostsfile.block import MalformedBlockError, merge_block
from roleserve_hostsfile.errors import FileUpdateError

__all__ = ["HOSTS_FILE", "read_file", "replace_file", "update_hosts_file", "write_if_changed"]

HOSTS_FILE = "hosts file"
"""How errors name the hosts file."""


def read_file(path: Path, what: str = HOSTS_FILE) -> bytes | None:
    """The bytes of ``path``, or None if it does not exist.

    :raises FileUpdateError: if it cannot be read (a directory, no permission, ...).
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FileUpdateError(what, path, "read", exc) from exc


def update_hosts_file(path: Path, block: bytes) -> bool:
    """Put ``block`` in place of the managed block of the hosts file ``path`` (creating the
    file if there is none), reading it again first so that an edit made outside the block
    since the last update is kept. Writes nothing if the file would not change.

    :returns: whether the file was written.
    :raises FileUpdateError: if it cannot be read or replaced, or its block has no end.
    """
    current = read_file(path)
    try:
        wanted = merge_block(current, block)
    except MalformedBlockError as exc:
        raise FileUpdateError(HOSTS_FILE, path, "update", str(exc)) from None
    if wanted == current:
        return False
    replace_file(path, wanted)
    return True


def write_if_changed(path: Path, data: bytes, what: str, *, mode: int | None = None) -> bool:
    """``replace_file`` unless ``path`` already holds ``data`` (and ``mode``, if given).

    :returns: whether the file was written.
    :raises FileUpdateError: if it cannot be read or replaced.
    """
    if read_file(path, what) == data and (mode is None or _mode(path, what) == mode):
        return False
    replace_file(path, data, what, mode=mode)
    return True


def replace_file(
    path: Path, data: bytes, what: str = HOSTS_FILE, *, mode: int | None = None
) -> None:
    """Replace ``path`` with a file holding ``data``, through a rename.

    The new file keeps the old one's owner (uid, gid) and mode; ``mode`` sets the mode
    instead. A file created where there was none gets ``mode`` or 0644, and the writer's
    owner.

    :raises FileUpdateError: if any step fails; the old file is untouched and no
        temporary file is left.
    """
    try:
        write_atomically(Path(os.path.realpath(path)), data, mode, keep_owner=True)
    except OSError as exc:
        raise FileUpdateError(what, path, "write", exc) from exc


def _mode(path: Path, what: str) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        raise FileUpdateError(what, path, "read", exc) from exc
