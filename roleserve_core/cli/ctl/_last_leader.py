"""The leader a ``ctl`` run last found, remembered in the access directory (file
``leader``: its node ID and curator endpoint, one line), so that the next run asks it
first instead of searching.

Why it is sound: the remembered leader is only where to look. The next run opens its
channel to it verifying exactly that node ID (as it would for a leader the curators named)
and asks it over that channel who leads; only if it answers that it does itself is the
channel used. Anything else (it stopped leading, refuses the connection, does not answer
in time, the file is unreadable) falls back to asking every curator, as without the file.
What it saves: the search's connection to every curator, and one to the leader.

Best effort, like the endpoints ``remember_curators`` keeps: an access directory that
cannot be written changes nothing. Not read nor written with ``--endpoint`` (the
operator named where to ask).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = ["LEADER_FILE", "remember", "remembered"]

LEADER_FILE = "leader"


def remembered(directory: Path) -> tuple[str, str] | None:
    """The node ID and curator endpoint remembered in ``directory``; None if none (or
    unreadable)."""
    try:
        words = (directory / LEADER_FILE).read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(words) != 2:
        return None
    return words[0], words[1]


def remember(directory: Path, node_id: str, endpoint: str) -> None:
    """Remember the leader in ``directory``, unless it is already."""
    if remembered(directory) == (node_id, endpoint):
        return
    from roleserve_core.files import write_atomically

    with contextlib.suppress(OSError):
        write_atomically(directory / LEADER_FILE, f"{node_id} {endpoint}\n".encode(), 0o644)
