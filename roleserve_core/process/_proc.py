"""What ``/proc`` says about processes: start time, state, parent, process group, CPU
time, command line.

The one reader of ``/proc/PID/stat`` in roleserve, its plugins, benchmarks and tests
(``read_stat``, ``read_stats``; ``roleserve_core.read_stat`` for a plugin): the command name
in it is in parentheses and may itself hold spaces and parentheses, so the fields are
counted from the last ``)``, which a hand-written split gets wrong for such a name.

A pid alone does not name a process: pids are reused. A pid together with its start time
(field 22 of ``/proc/PID/stat``, clock ticks since boot) and the boot ID does: that triple
is how the runner proves a process is the one it started, and nothing that is not proved
is ever signalled.

A process that has exited but is not reaped yet (a zombie) still has its ``/proc`` entry
and its pid, and ``kill(pid, 0)`` still succeeds on it. Orphans are reaped by PID 1, which
on some machines takes seconds, so every "is it still there" here treats a zombie as gone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import anyio

from roleserve_core.text import cut

__all__ = [
    "ProcStat",
    "boot_id",
    "command_line",
    "group_members",
    "read_stat",
    "read_stats",
    "wait_group_empty",
]

_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` roleserve reads (numbered from 1 as in proc(5))."""

    pid: int
    state: str
    """One letter: ``R``, ``S``, ``D``, ``Z`` (zombie), ``X`` (dead), ... (field 3)."""
    ppid: int
    """Its parent's pid (field 4)."""
    pgrp: int
    """Its process group (field 5)."""
    utime: int
    """CPU time in user mode, in clock ticks (field 14)."""
    stime: int
    """CPU time in kernel mode, in clock ticks (field 15)."""
    start_time: int
    """When it started, in clock ticks since boot (field 22)."""

    @property
    def gone(self) -> bool:
        """Whether it has exited (a zombie waiting to be reaped counts as exited)."""
        return self.state in ("Z", "X")

    @property
    def cpu_seconds(self) -> float:
        """CPU time it has used so far, user and kernel, in seconds."""
        return (self.utime + self.stime) / os.sysconf("SC_CLK_TCK")


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/PID/stat`` of ``pid``, or None if there is no such process (or it is
    unreadable)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return _parse_stat(pid, text)


def _parse_stat(pid: int, text: str) -> ProcStat | None:
    """The fields of a ``stat`` line; None if it is not one."""
    # The command name (field 2) is in parentheses and may itself hold spaces and ')'.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return ProcStat(
            pid=pid,
            state=fields[0],
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            utime=int(fields[11]),
            stime=int(fields[12]),
            start_time=int(fields[19]),
        )
    except (IndexError, ValueError):
        return None


def read_stats() -> list[ProcStat]:
    """``/proc/PID/stat`` of every process ``/proc`` shows (zombies too), but those that
    exit while it reads."""
    with os.scandir(_PROC) as entries:
        pids = [int(entry.name) for entry in entries if entry.name.isdigit()]
    return [stat for pid in pids if (stat := read_stat(pid)) is not None]


_boot_id: str | None = None


def boot_id() -> str:
    """This boot's random ID: start times are comparable only within one boot."""
    global _boot_id
    if _boot_id is None:
        try:
            _boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            _boot_id = "unknown"
    return _boot_id


def command_line(pid: int, limit: int = 160) -> str | None:
    """The command line of ``pid``, shortened to ``limit`` characters; None if unreadable."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    text = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    if not text:
        stat = read_stat(pid)
        if stat is None:
            return None
        try:
            text = "[" + (_PROC / str(pid) / "comm").read_text().strip() + "]"
        except OSError:
            return None
    return cut(text, limit)


def group_members(pgid: int) -> list[int]:
    """The pids of the processes in group ``pgid`` that have not exited (zombies excluded).

    ``killpg(pgid, 0)`` answers "nobody" at once in the common case; only a group that
    still has members (maybe zombies) costs a scan of ``/proc``.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # someone's there; the scan says who
    return [stat.pid for stat in read_stats() if stat.pgrp == pgid and not stat.gone]


async def wait_group_empty(pgid: int, limit: float | None = None) -> bool:
    """Wait until group ``pgid`` has no live member; False if ``limit`` seconds
    passed first.

    Polls, since no event reports the end of processes that are not our children: every
    2 ms at first, backing off to every 50 ms.
    """
    delay = 0.002
    with anyio.move_on_after(limit):
        while group_members(pgid):
            await anyio.sleep(delay)
            delay = min(delay * 1.5, 0.05)
        return True
    return False
