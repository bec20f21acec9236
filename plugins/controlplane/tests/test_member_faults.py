"""An etcd member meeting faults that are not a crash: a disk too small or filled while etcd
runs (a real tmpfs), and an etcd that stops answering (SIGSTOP). Each is one line on the
runnable, and the member recovers by itself once the cause is gone, with its data."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from roleserve_controlplane.consensus import (
    EtcdRequestError,
    Liveness,
    MemberConfig,
)
from roleserve_controlplane.consensus.space import (
    SPACE_MARGIN,
    WAL_SEGMENT_BYTES,
    disk_full,
    needed_bytes,
)
from roleserve_controlplane.testing import EtcdCluster, RunningMember, etcd_binary
from roleserve_core import WAITING_FOR_OPERATOR, RunnableStatus, State
from roleserve_core.testing import (
    FakeClock,
    SupervisorRunner,
    Tmpfs,
    mounted_tmpfs,
    wait_for_status,
)
from roleserve_core.testing import tree_line as kit_tree_line

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
NEW_MEMBER_NEEDS = 2 * WAL_SEGMENT_BYTES + SPACE_MARGIN


@pytest.fixture
def cluster(tmp_path: Path, supervisor_runner: SupervisorRunner) -> EtcdCluster:
    """Members of Debian's etcd (one build is enough: the faults are the kernel's)."""
    return EtcdCluster(etcd_binary("debian"), tmp_path, supervisor_runner.start)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Tmpfs]:
    """A 240 MiB disk: room for a new member (about 138 MiB) and a restart after a crash
    that left its next log segment allocated, but not for much more."""
    with mounted_tmpfs(tmp_path / "disk", 240 * MiB) as mounted:
        yield mounted


def on_disk(cluster: EtcdCluster, disk: Tmpfs) -> MemberConfig:
    """Member 0, with its directory on ``disk``."""
    return replace(cluster.config(0), directory=disk.path / "m0")


async def restart_after_backoff(member: RunningMember, clock: FakeClock, failures: int) -> None:
    """Let the supervisor's (fake) backoff after failure number ``failures`` pass."""
    failed = await wait_for_status(member.supervisor, "root", lambda s: s.failures == failures)
    assert failed.restart_in is not None
    clock.advance(failed.restart_in)


def tree_line(status: RunnableStatus) -> str:
    """The runnable's line in ``ctl tree``, as the node sends it and ``ctl`` draws it."""
    return kit_tree_line(status, "etcd")


def test_what_a_member_needs_and_a_full_disk_in_etcds_lines(tmp_path: Path) -> None:
    assert needed_bytes(tmp_path) == 2 * WAL_SEGMENT_BYTES + SPACE_MARGIN
    (tmp_path / "data" / "member" / "wal").mkdir(parents=True)
    assert needed_bytes(tmp_path) == WAL_SEGMENT_BYTES + SPACE_MARGIN
    assert disk_full(["failed to commit tx error=a corrupt page"], tmp_path) is None
    lines = ["slow fdatasync", "failed to commit tx error=write db: no space left on device"]
    full = disk_full(lines, tmp_path)
    assert full is not None
    assert str(full).endswith("(etcd: failed to commit tx error=write db: no space left on device)")
    assert (full.directory, full.needed) == (tmp_path, WAL_SEGMENT_BYTES + SPACE_MARGIN)


def last_error(status: RunnableStatus) -> tuple[str, str]:
    assert status.last_error is not None
    return status.last_error.type.rsplit(".", 1)[-1], status.last_error.message


async def test_too_little_space_is_one_line_and_the_member_starts_once_space_is_freed(
    cluster: EtcdCluster, disk: Tmpfs, fake_clock: FakeClock
) -> None:
    config = on_disk(cluster, disk)
    disk.fill(leave=64 * MiB)  # the operator's case: etcd cannot allocate its log
    member = await cluster.start(config, wait=False)
    refused = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 1)
    kind, message = last_error(refused)
    assert kind == "DiskSpaceError"
    assert message.startswith(f"not enough free space for etcd in {config.directory}: ")
    assert f"{disk.free} bytes" in message
    assert f"{NEW_MEMBER_NEEDS} bytes (138.1 MiB) needed" in message
    assert "\n" not in message
    assert not (config.directory / "etcd.process.json").exists()  # etcd never started
    [logged] = [
        entry
        for entry in member.supervisor.logtree.entries("root")
        if entry.level >= logging.WARNING
    ]
    assert (logged.level, logged.message.split("; restarting")[0]) == (
        logging.ERROR,
        WAITING_FOR_OPERATOR + message,
    )
    assert logged.exc_text is None  # no traceback
    disk.release()
    await restart_after_backoff(member, fake_clock, failures=1)
    await wait_for_status(member.supervisor, "root", lambda s: s.state is State.HEALTHY)


async def fill_until_etcd_stops(member: RunningMember, cluster: EtcdCluster) -> RunnableStatus:
    """Write 1 MiB values until etcd dies of the full disk (the database grows page by page,
    unlike the log); the runnable's status once it has."""
    value = os.urandom(MiB)
    async with cluster.client(attempts=1, timeout=2.0) as client:
        with anyio.fail_after(60):
            for index in range(1000):
                status = member.supervisor.status_of("root")
                if status.failures:
                    return status
                try:
                    await client.put(f"/filler/{index}", value)
                except EtcdRequestError:
                    await anyio.sleep(0.1)  # polling another process: etcd dying
    raise AssertionError("etcd survived a full disk")


async def test_a_disk_filled_while_etcd_runs_is_one_line_and_it_recovers_with_its_data(
    cluster: EtcdCluster, disk: Tmpfs, fake_clock: FakeClock
) -> None:
    config = on_disk(cluster, disk)
    member = await cluster.start(config)
    async with cluster.client() as client:
        await client.put("/kept", "before the disk filled")
    disk.fill()
    stopped = await fill_until_etcd_stops(member, cluster)
    kind, message = last_error(stopped)
    assert kind == "DiskSpaceError", message
    assert message.startswith(f"etcd stopped: the disk of {config.directory} is full (")
    assert "no space left on device" in message
    assert "\n" not in message
    line = tree_line(stopped)  # DEAD, or NEW while its backoff runs
    assert line.startswith(("etcd  DEAD  ", "etcd  NEW  ")), line
    assert (
        f"  last error: roleserve_controlplane.consensus.errors.DiskSpaceError: {message}  "
        "restart in "
    ) in line
    await restart_after_backoff(member, fake_clock, failures=1)
    refused = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 2)
    assert last_error(refused)[1].startswith("not enough free space for etcd in ")
    disk.release()
    await restart_after_backoff(member, fake_clock, failures=2)
    await wait_for_status(member.supervisor, "root", lambda s: s.state is State.HEALTHY)
    async with cluster.client() as client:
        kept = await client.get("/kept")
    assert kept is not None
    assert kept.value == b"before the disk filled"


async def test_an_etcd_that_stops_answering_is_noted_then_restarted(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    """SIGSTOP, as a paused VM or a stalled disk: the process runs and never answers."""
    probe = Liveness(interval=0.2, timeout=0.5, failures=3)
    member = await cluster.start(replace(cluster.config(0), liveness=probe))
    async with cluster.client() as client:
        await client.put("/kept", "before the pause")
    program = member.runnable.program
    assert program is not None
    os.kill(program.pid, signal.SIGSTOP)
    noted = await wait_for_status(
        member.supervisor, "root", lambda s: "not answering since" in s.note
    )
    assert noted.state is State.HEALTHY
    assert noted.note.startswith(f"etcd (pid {program.pid}) not answering since ")
    assert noted.note.endswith(" UTC (1 of 3 probes failed)")
    await restart_after_backoff(member, fake_clock, failures=1)
    kind, message = last_error(member.supervisor.status_of("root"))
    assert kind == "EtcdNotAnsweringError"
    assert "(3 of 3 probes failed); restarting it" in message
    assert program.exited.is_set()  # SIGKILLed: a stopped process ignores SIGTERM
    healthy = await wait_for_status(
        member.supervisor, "root", lambda s: s.state is State.HEALTHY and s.restarts == 1
    )
    assert healthy.note == ""
    async with cluster.client() as client:
        kept = await client.get("/kept")
    assert kept is not None
    assert kept.value == b"before the pause"
