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


def smaps_rollup(pid: int) -> dict[str, int]:
    """``/proc/PID/smaps_rollup`` (KiB each): ``Rss``, ``Pss`` (shared pages divided
    among the processes that map them), ``Anonymous`` (heaps, stacks), ``Shared_Clean``
    and ``Private_Clean`` (mostly libraries' code), ``Private_Dirty`` …"""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, value = line.partition(":")
        fields[name] = int(value.split()[0])
    return fields


GLIBC_HEAP = 64 << 20
"""The size and alignment of each of glibc's extra malloc arenas' heaps (64-bit)."""


def malloc_arenas(pid: int) -> int:
    """glibc malloc arenas of ``pid``: the main one, and one per 64 MiB-aligned anonymous
    heap of 64 MiB in its memory map (its used part, then its reserve, which is not
    readable), as glibc lays them out. An estimate from outside the process, by shape."""
    regions = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) == 5:  # no path: anonymous
            start, end = (int(part, 16) for part in fields[0].split("-"))
            regions.append((start, end))
    end_of = dict(regions)
    heaps = 0
    for start, end in regions:
        if start % GLIBC_HEAP == 0:
            reach = end_of.get(end, end) if end - start < GLIBC_HEAP else end
            heaps += reach - start == GLIBC_HEAP
    return 1 + heaps
