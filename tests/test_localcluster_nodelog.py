"""What ``cluster up`` reads in a node's log when the node stops: this start's lines only,
and the node's own error line among them (``localcluster.nodelog``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roleserve_core.localcluster.cluster import _exit_status
from roleserve_core.localcluster.nodelog import (
    complete_lines_since,
    full_disk,
    lines_since,
    own_error,
)

ETCD_NOISE = [
    "12:00:01 WARNING root.role.controlplane.etcd: etcd: stopping serving peer traffic",
    "12:00:01 WARNING root.role.controlplane.etcd: etcd: closed etcd server",
]


def test_the_nodes_refusal_wins_over_what_its_stop_set_off() -> None:
    lines = [
        "12:00:00 ERROR root.role.controlplane: etcd exited (status 1)",
        *ETCD_NOISE,
        "roleserve node: error: root.role.controlplane: the configured etcd is not executable",
    ]
    assert own_error(lines) == "root.role.controlplane: the configured etcd is not executable"


def test_a_crash_is_the_last_line_of_its_traceback() -> None:
    lines = [
        "12:00:00 ERROR root.role.x: runnable failed",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "    boom()",
        "ZeroDivisionError: division by zero",
        *ETCD_NOISE,
    ]
    assert own_error(lines) == "ZeroDivisionError: division by zero"


def test_else_the_first_error_logged_and_none_without_one() -> None:
    lines = [*ETCD_NOISE, "12:00:02 ERROR root.role.x: it broke", "12:00:03 ERROR root.y: so?"]
    assert own_error(lines) == "root.role.x: it broke"
    assert own_error(ETCD_NOISE) is None


def test_lines_since_an_offset_and_from_the_start_of_a_rotated_log(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text("roleserve node: error: an earlier attempt\n")
    offset = log.stat().st_size
    with log.open("a") as appended:
        appended.write("this start\n")
    assert lines_since(log, offset) == ["this start"]
    log.write_text("rotated\n")  # shorter than the offset: a new file
    assert lines_since(log, offset) == ["rotated"]
    assert lines_since(tmp_path / "missing", 0) == []


def test_complete_lines_since_leave_a_line_being_written_for_the_next_read(
    tmp_path: Path,
) -> None:
    log = tmp_path / "node.log"
    log.write_text("earlier\nfirst\nsecond, half")
    start = len("earlier\n")
    lines, offset = complete_lines_since(log, start)
    assert (lines, offset) == (["first"], len("earlier\nfirst\n"))
    with log.open("a") as appended:
        appended.write(" written\n")
    assert complete_lines_since(log, offset) == (["second, half written"], log.stat().st_size)
    log.write_text("rotated\n")  # shorter than the offset: a new file
    assert complete_lines_since(log, offset) == (["rotated"], len("rotated\n"))
    assert complete_lines_since(tmp_path / "missing", 7) == ([], 7)


def _filesystem(free: int, available: int) -> os.statvfs_result:
    """A filesystem of 4 KiB blocks with ``free`` of them free, ``available`` of those to
    anyone but root (the rest reserved for root)."""
    return os.statvfs_result((4096, 4096, 1 << 20, free, available, 1000, 500, 500, 0, 255))


@pytest.mark.parametrize(("euid", "full"), [(0, None), (1000, 0)])
def test_root_counts_the_blocks_reserved_for_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, euid: int, full: int | None
) -> None:
    """5% of the disk reserved for root, none available to others: full for a user, not
    for a root-run (``--netns``) node, which may still write 200 MiB."""
    monkeypatch.setattr(os, "statvfs", lambda _: _filesystem(free=51_200, available=0))
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    assert full_disk(tmp_path) == full


def test_a_disk_with_room_is_not_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert full_disk(tmp_path) is None
    assert full_disk(tmp_path / "missing") is None
    monkeypatch.setattr("roleserve_core.localcluster.nodelog.FULL_BELOW", 2**62)
    free = full_disk(tmp_path)
    assert free is not None
    assert 0 <= free < 2**62


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (None, ""),
        (2, " (exit status 2)"),
        (-9, " (killed by SIGKILL)"),
        (-40, " (killed by signal 40)"),
    ],
)
def test_how_a_node_ended_is_said(status: int | None, said: str) -> None:
    assert _exit_status(status) == said
