"""The inotify shortage ``cluster up`` names, read from a /proc of the test's own."""

from __future__ import annotations

import os
from pathlib import Path

from roleserve_kubernetes.inotify import INOTIFY, inotify_shortage, inotify_usage


def fake_proc(tmp_path: Path, limit: int, held: dict[int, int]) -> Path:
    """A /proc whose processes (pid: inotify instances) hold one other file each too."""
    proc = tmp_path / "proc"
    (proc / "sys/fs/inotify").mkdir(parents=True)
    (proc / "sys/fs/inotify/max_user_instances").write_text(f"{limit}\n")
    (proc / "self").mkdir()  # not a process directory: skipped
    for pid, count in held.items():
        fds = proc / str(pid) / "fd"
        fds.mkdir(parents=True)
        os.symlink("/dev/null", fds / "0")
        for fd in range(1, count + 1):
            os.symlink(INOTIFY, fds / str(fd))
    return proc


def test_usage_counts_the_users_inotify_instances(tmp_path: Path) -> None:
    assert inotify_usage(fake_proc(tmp_path, 128, {10: 6, 11: 1, 12: 0})) == (7, 128)


def test_a_shortage_is_one_line_naming_the_sysctl(tmp_path: Path) -> None:
    line = inotify_shortage(fake_proc(tmp_path, 20, {10: 6, 11: 6, 12: 6}))
    assert line is not None
    assert "\n" not in line
    assert line.startswith("Kubernetes: 18 of this user's 20 inotify instances are in use")
    assert line.endswith("`sysctl -w fs.inotify.max_user_instances=1024`")


def test_no_shortage_says_nothing(tmp_path: Path) -> None:
    assert inotify_shortage(fake_proc(tmp_path, 128, {10: 6, 11: 1})) is None
    assert inotify_shortage(tmp_path / "no-proc") is None
