"""How the node process treats a final failure: it stops a node that is not enrolled yet
(nothing could see or fix it otherwise) and only records it once the node is enrolled."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from roleserve_core.daemon import _stop_if_not_enrolled
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.event import Value
from roleserve_core.supervisor import RunnableStatus, State
from roleserve_core.testing import wait_for_value

pytestmark = pytest.mark.anyio

FINAL = RunnableStatus(
    dn="root.role.controlplane",
    state=State.DEAD,
    restarts=0,
    failures=1,
    last_error=None,
    since=time.time(),
    crash_looping=False,
    restart_in=None,
    note="no etcd binary found; install etcd",
    final=True,
)


async def test_a_final_failure_stops_a_node_that_is_not_enrolled(tmp_path: Path) -> None:
    finals: Value[RunnableStatus] = Value()
    stopped: Value[str] = Value()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_stop_if_not_enrolled(NodeDataDirectory(tmp_path), finals), stopped)
        finals.set(FINAL)
        reason = await wait_for_value(stopped)
        tasks.cancel_scope.cancel()
    assert reason == "root.role.controlplane: no etcd binary found; install etcd"


async def test_an_enrolled_node_keeps_running(tmp_path: Path) -> None:
    datadir = NodeDataDirectory(tmp_path)
    datadir.credentials.mkdir(parents=True)
    assert datadir.enrolled
    finals: Value[RunnableStatus] = Value()
    stopped: Value[str] = Value()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_stop_if_not_enrolled(datadir, finals), stopped)
        with finals.watch() as seen:
            finals.set(FINAL)
            await seen.get()
        await anyio.wait_all_tasks_blocked()  # the watcher has taken the failure in
        tasks.cancel_scope.cancel()
    assert not stopped.statistics().is_set
