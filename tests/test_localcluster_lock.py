"""One ``cluster up`` at a time on a directory (``localcluster.lock``), and ``--dir`` given
a file: one line, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from roleserve_core.localcluster.lock import LOCK_FILE, UpLockError, holding_up_lock
from roleserve_core.testing import poll_until

COMMAND = [sys.executable, "-m", "roleserve_core", "cluster"]


@pytest.mark.anyio
async def test_a_second_holder_waits_for_the_first_and_says_so_once(tmp_path: Path) -> None:
    said: list[str] = []
    order: list[str] = []
    first_in = anyio.Event()
    release = anyio.Event()

    async def first() -> None:
        async with holding_up_lock(tmp_path, said.append):
            order.append("first")
            first_in.set()
            await release.wait()

    async def second() -> None:
        await first_in.wait()
        async with holding_up_lock(tmp_path, said.append):
            order.append("second")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(first)
        tasks.start_soon(second)
        await poll_until("the second waits", _said(said), bool, timeout=10)
        assert order == ["first"]
        release.set()
    assert order == ["first", "second"]
    assert said == [
        f"waiting for the other `cluster up` on {tmp_path} (pid {os.getpid()}) to finish"
    ]


def _said(said: list[str]) -> Callable[[], Awaitable[list[str]]]:
    async def look() -> list[str]:
        return said

    return look


@pytest.mark.anyio
async def test_a_directory_that_cannot_hold_the_lock_is_one_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UpLockError, match=f"cannot use {blocker / 'cluster'} as a cluster's"):
        async with holding_up_lock(blocker / "cluster", print):
            pass


@pytest.mark.anyio
async def test_cluster_up_waits_for_the_other_up_on_its_directory(tmp_path: Path) -> None:
    """Two ``up`` on one fresh directory: the second started bootstrapping beside the
    first (or said ``the cluster is up: 1 node`` while the first still enrolled the
    others). It waits, saying for whom, and starts nothing meanwhile; Ctrl-C ends it."""
    directory = tmp_path / "cluster"
    argv = [*COMMAND, "up", "--detach", "--nodes", "1", "--dir", str(directory)]
    async with holding_up_lock(directory, print):  # the first `cluster up`, as it were
        process = await anyio.open_process([*argv, "--first-address", "127.0.99.11"])
        try:
            assert process.stdout is not None
            seen = ""
            with anyio.fail_after(30):
                async for chunk in process.stdout:
                    seen += chunk.decode()
                    if "waiting for the other" in seen:
                        break
            assert seen.splitlines()[-1].endswith(
                f"waiting for the other `cluster up` on {directory} (pid {os.getpid()}) to finish"
            ), seen
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(30):
                code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
            await process.aclose()
        assert code == 130
        assert sorted(path.name for path in directory.iterdir()) == [LOCK_FILE]


def test_cluster_up_on_a_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    for command in ("up", "status", "down"):
        done = subprocess.run(
            [*COMMAND, command, "--dir", str(path)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr == (
            f"roleserve cluster: error: --dir {path} is a file, not a directory; give a "
            "cluster's directory, or a new path for a new cluster\n"
        )
