"""What ``/proc`` says about a process the benchmarks measure: its memory and CPU time."""

from __future__ import annotations

import os
from pathlib import Path

from roleserve_core.process import read_stat


def status_value(pid: int | str, field: str) -> int:
    """The number on a line of ``/proc/PID/status``: KiB for memory (``VmRSS``,
    ``RssAnon``), a count for ``Threads``; ``pid`` may be ``"self"``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0])
    raise LookupError(f"no {field} for {pid}")


def open_files(pid: int) -> int:
    """The file descriptors ``pid`` holds open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """CPU time ``pid`` has used, user and system."""
    stat = read_stat(pid)
    if stat is None:
        raise LookupError(f"no process {pid}")
    return stat.cpu_seconds
