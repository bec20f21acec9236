"""The one reader of ``/proc/PID/stat`` (roleserve_core.read_stat, read_stats): real
processes, a command name that would fool a split on the first ``)``, a zombie."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import roleserve_core
from roleserve_core import read_stat, read_stats
from roleserve_core.process._proc import _parse_stat


@pytest.fixture
def child(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child running ``sleep`` under the name ``x) Z 1 (y``: its ``stat`` line reads
    ``PID (x) Z 1 (y) S PPID ...``, so a parser that splits at the first ``)`` sees a zombie
    whose parent is 1."""
    program = tmp_path / "x) Z 1 (y"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
    process = subprocess.Popen([program, "600"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_read_stat_counts_the_fields_from_the_last_parenthesis(
    child: subprocess.Popen[bytes],
) -> None:
    stat = read_stat(child.pid)
    assert stat is not None
    assert (stat.pid, stat.ppid, stat.pgrp) == (child.pid, os.getpid(), os.getpgrp())
    assert stat.state in ("R", "S")
    assert not stat.gone
    ours = read_stat(os.getpid())
    assert ours is not None
    assert stat.start_time >= ours.start_time


def test_read_stat_of_this_process_gives_its_cpu_time() -> None:
    stat = read_stat(os.getpid())
    assert stat is not None
    assert (stat.ppid, stat.pgrp, stat.state) == (os.getppid(), os.getpgrp(), "R")
    times = os.times()
    assert stat.cpu_seconds == (stat.utime + stat.stime) / os.sysconf("SC_CLK_TCK")
    assert abs(stat.cpu_seconds - (times.user + times.system)) < 0.5
    assert stat.cpu_seconds > 0


def test_a_zombie_is_gone() -> None:
    process = subprocess.Popen(["true"])
    try:
        # Exited, and not reaped (WNOWAIT): a zombie until process.wait() below.
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        stat = read_stat(process.pid)
        assert stat is not None
        assert stat.state == "Z"
        assert stat.gone
    finally:
        process.wait()
    assert read_stat(process.pid) is None


def test_no_such_process_is_none() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert read_stat(pid_max + 1) is None


def test_a_line_that_is_not_a_stat_line_is_none() -> None:
    assert _parse_stat(1, "1 (init) S 0") is None
    assert _parse_stat(1, "garbage") is None


def test_read_stats_shows_every_process(child: subprocess.Popen[bytes]) -> None:
    stats = read_stats()
    pids = [stat.pid for stat in stats]
    assert len(pids) == len(set(pids))
    assert {os.getpid(), child.pid} <= set(pids)
    assert next(stat for stat in stats if stat.pid == child.pid) == read_stat(child.pid)


def test_the_reader_is_the_plugin_api() -> None:
    from roleserve_core import process

    assert (roleserve_core.ProcStat, roleserve_core.read_stat, roleserve_core.read_stats) == (
        process.ProcStat,
        process.read_stat,
        process.read_stats,
    )
