"""What a local node's log says about why it stopped or stalls, read from one start only.

::

    node.log   …lines of earlier runs…        ─ never read for this start's failure
               ◀── offset when up started it (LocalNode.start)
               …this start's lines…  ─▶ own_error(): the node's own error line
                                         ─▶ (none found) the last lines, to show instead

A node that exits at start says why in one line, ``roleserve node: error: …``, often
after many lines of what its stop set off (etcd's shutdown warnings); shown as the last
of 20 lines, below an error from a previous attempt, the cause came last and looked stale.
``own_error`` picks it out, so that ``cluster up`` says it first; a node that crashed
instead has a traceback, whose last line is the cause; failing both, its first ERROR line.

A node whose disk is full cannot write its log, so neither its error line nor the line
saying it waits for space (``LocalNode.refusal``) ever arrives, and ``up`` would wait for
the whole step's timeout: ``full_disk`` looks at the free space itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "FULL_BELOW",
    "complete_lines_since",
    "free_bytes",
    "full_disk",
    "lines_since",
    "own_error",
]

FULL_BELOW = 1024 * 1024
"""Bytes free under which a node's disk counts as full: no room for its log and state
(a page of a tmpfs, or a few blocks, may stay free on a disk that refuses writes)."""
_NODE_ERROR = "roleserve node: error: "
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*")
_LOGGED_ERROR = re.compile(r"^\S+ (?:ERROR|CRITICAL)\s+(?P<said>\S+: .*)$")


def lines_since(path: Path, offset: int) -> list[str]:
    """The lines of ``path`` from byte ``offset`` (from its start if the file is now
    shorter: rotated, a new file); none if it cannot be read."""
    read = _read_since(path, offset)
    return [] if read is None else read[1].decode(errors="replace").splitlines()


def complete_lines_since(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines of ``path`` from byte ``offset``, as ``lines_since``, and the
    offset after them, to read the next ones from: a line the node is still writing is
    left for the next read. None read (unreadable): no lines, ``offset`` as it was."""
    read = _read_since(path, offset)
    if read is None:
        return [], offset
    start, written = read
    complete = written[: written.rfind(b"\n") + 1]
    return complete.decode(errors="replace").splitlines(), start + len(complete)


def _read_since(path: Path, offset: int) -> tuple[int, bytes] | None:
    """Where ``path`` was read from (``offset``, or 0 if rotated) and what it holds after
    that; None if it cannot be read."""
    try:
        with path.open("rb") as log:
            if log.seek(0, os.SEEK_END) < offset:
                offset = 0
            log.seek(offset)
            return offset, log.read()
    except OSError:
        return None


def own_error(lines: Sequence[str]) -> str | None:
    """The node's own error line among ``lines`` (see the module docstring), without the
    ``roleserve node: error:`` prefix; None if they hold none."""
    for line in reversed(lines):
        if line.startswith(_NODE_ERROR):
            return line.removeprefix(_NODE_ERROR)
    if _TRACEBACK in lines:
        last = len(lines) - 1 - list(reversed(lines)).index(_TRACEBACK)
        for line in lines[last + 1 :]:
            if _EXCEPTION.match(line):
                return line
    for line in lines:
        if (match := _LOGGED_ERROR.match(line)) is not None:
            return match["said"]
    return None


def full_disk(directory: Path) -> int | None:
    """The bytes free on the filesystem of ``directory`` if fewer than ``FULL_BELOW``;
    None if more, or if it cannot be told."""
    try:
        free = free_bytes(os.statvfs(directory), os.geteuid())
    except OSError:
        return None
    return free if free < FULL_BELOW else None


def free_bytes(stat: os.statvfs_result, euid: int) -> int:
    """The bytes a process of ``euid`` may still write on a filesystem: root may use the
    blocks reserved for it (``f_bfree``), anyone else not (``f_bavail``). Counting a
    root-run (``--netns``) node's disk by ``f_bavail`` would call a disk full that it can
    still write, and refuse on that guess."""
    blocks = stat.f_bfree if euid == 0 else stat.f_bavail
    return blocks * stat.f_frsize
