"""The component runnables with stand-in binaries: the real kube binaries are on no
machine by default (no package ships them: the plugin's README, "Which Kubernetes"), so a
test writes a tiny program of its own. That tests the plugin's handling (absent, broken,
ready), not Kubernetes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from roleserve_core import RunContext, Runnable, RunnableStatus, State, Supervisor
from roleserve_core.testing import (
    FakeClock,
    SupervisorRunner,
    random_loopback,
    wait_for_state,
    wait_for_status,
)
from roleserve_kubernetes.apiserver import WAITING_FOR_APISERVER, apiserver_runnable
from roleserve_kubernetes.binaries import KUBELET, SCHEDULER
from roleserve_kubernetes.kubelet import kubelet_runnable
from roleserve_kubernetes.plans import ControllerInputs, EtcdClientFiles, KubeletInputs
from roleserve_kubernetes.scheduler import scheduler_runnable
from roleserve_kubernetes.testing import stand_in_apiserver, throwaway_pki

pytestmark = pytest.mark.anyio


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def controller_inputs(tmp_path: Path) -> ControllerInputs:
    address = random_loopback()
    etcd = tmp_path / "etcd"
    etcd.mkdir()
    files = EtcdClientFiles(etcd / "ca.pem", etcd / "member.pem", etcd / "member-key.pem")
    for path in (files.ca, files.certificate, files.key):
        path.write_bytes(b"not read by the stand-in")
    files.key.chmod(0o600)
    return ControllerInputs(
        directory=tmp_path / "data" / "controller",
        address=address,
        pki=throwaway_pki([address]),
        etcd_endpoint=f"{address}:7836",
        etcd=files,
    )


def with_note(note: str) -> Callable[[RunnableStatus], bool]:
    return lambda status: status.note == note


async def start(runner: SupervisorRunner, children: dict[str, Runnable]) -> Supervisor:
    async def root(ctx: RunContext) -> None:
        for name, runnable in children.items():
            ctx.run(name, runnable)
        ctx.signal_healthy()
        await anyio.sleep_forever()

    return await runner.start(root)


async def test_absent_binaries_are_not_healthy_a_note_and_no_crash_loop(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    inputs = controller_inputs(tmp_path)

    def no_plan() -> KubeletInputs:
        raise AssertionError("no binary: no plan is made, no file written")

    supervisor = await start(
        supervisor_runner,
        {
            "scheduler": scheduler_runnable(inputs, None, tmp_path),
            "kubelet": kubelet_runnable(no_plan, None, tmp_path),
        },
    )
    for name, note in (
        (
            "scheduler",
            "kube-scheduler not found: set [plugins.kubernetes] kube_scheduler or install it",
        ),
        ("kubelet", "kubelet not found: container runtime only"),
    ):
        status = await wait_for_status(supervisor, f"root.{name}", with_note(note))
        # Not running, so not HEALTHY: it stays NEW with the note, never restarted.
        assert (status.state, status.failures, status.restart_in) == (State.NEW, 0, None)
    assert SCHEDULER.absent_note.startswith("kube-scheduler not found")
    assert KUBELET.absent_note == "kubelet not found: container runtime only"
    assert not inputs.directory.exists()  # nothing written for a component that cannot run


async def test_a_binary_that_exits_at_once_is_dead_with_its_reason_and_retried(
    tmp_path: Path, supervisor_runner: SupervisorRunner, fake_clock: FakeClock
) -> None:
    inputs = controller_inputs(tmp_path)
    broken = executable(
        tmp_path / "kube-apiserver",
        "#!/bin/sh\necho 'Error: unknown flag: --advertise-address' >&2\nexit 1\n",
    )
    ready: list[bool] = []
    supervisor = await start(
        supervisor_runner,
        {
            "apiserver": apiserver_runnable(inputs, broken, tmp_path, ready.append),
            "scheduler": scheduler_runnable(inputs, None, tmp_path),
        },
    )
    dead = await wait_for_status(
        supervisor,
        "root.apiserver",
        lambda status: status.failures == 1 and status.restart_in is not None,
    )
    assert dead.last_error is not None
    assert (dead.state, dead.restart_in) == (State.NEW, 0.5)  # waiting out the backoff
    assert dead.last_error.message == (
        "kube-apiserver exited with status 1: Error: unknown flag: --advertise-address"
    )
    assert not dead.final
    sibling = supervisor.status_of("root.scheduler")
    # The node keeps everything else as it was: the (absent) sibling was not touched.
    assert (sibling.restarts, sibling.note) == (0, SCHEDULER.absent_note)

    fake_clock.advance(0.5)  # the backoff, then a second try
    await wait_for_status(
        supervisor,
        "root.apiserver",
        lambda status: status.failures == 2,
    )
    assert ready == []


async def test_a_configured_binary_that_is_not_executable_is_dead_for_good(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    inputs = controller_inputs(tmp_path)
    not_executable = tmp_path / "kube-scheduler"
    not_executable.write_text("#!/bin/sh\n")
    supervisor = await start(
        supervisor_runner, {"scheduler": scheduler_runnable(inputs, not_executable, tmp_path)}
    )
    status = await wait_for_status(
        supervisor,
        "root.scheduler",
        lambda status: status.final,
    )
    assert status.state is State.DEAD
    assert f"{not_executable} (given, not executable)" in status.note
    assert "kube_scheduler" in status.note


async def test_the_planned_flags_and_files_make_a_stand_in_apiserver_ready(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    inputs = controller_inputs(tmp_path)
    binary = stand_in_apiserver(tmp_path / "kube-apiserver")
    ready: list[bool] = []
    supervisor = await start(
        supervisor_runner,
        {"apiserver": apiserver_runnable(inputs, binary, tmp_path, ready.append)},
    )
    status = await wait_for_state(supervisor, "root.apiserver")
    assert status.note.startswith("kube-apiserver ready, pid ")
    assert ready == [True]
    key = inputs.directory / "apiserver" / "apiserver-key.pem"
    assert oct(os.stat(key).st_mode & 0o777) == "0o600"
    await supervisor_runner.stop(supervisor)
    assert ready == [True, False]


async def test_the_scheduler_starts_once_the_local_apiserver_is_ready(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    """Started before, the controller-manager exited at once ("forbidden") and
    crash-looped; now a controller's component waits, not failing, until /readyz says 200."""
    inputs = controller_inputs(tmp_path)
    started = tmp_path / "scheduler-started"
    scheduler = executable(tmp_path / "kube-scheduler", f"#!/bin/sh\ntouch {started}\nexit 1\n")
    supervisor = await start(
        supervisor_runner, {"scheduler": scheduler_runnable(inputs, scheduler, tmp_path)}
    )
    waiting = await wait_for_status(supervisor, "root.scheduler", with_note(WAITING_FOR_APISERVER))
    assert (waiting.state, waiting.failures) == (State.NEW, 0)
    assert not await anyio.Path(started).exists()  # its binary not run while it waits
    binary = stand_in_apiserver(tmp_path / "kube-apiserver")
    await start(
        supervisor_runner, {"apiserver": apiserver_runnable(inputs, binary, tmp_path, _ignore)}
    )
    failed = await wait_for_status(supervisor, "root.scheduler", lambda s: s.failures >= 1)
    assert failed.last_error is not None
    assert "kube-scheduler exited with status 1" in failed.last_error.message
    assert await anyio.Path(started).exists()  # run once the stand-in apiserver was ready


def _ignore(ready: bool) -> None:
    """Nobody needs the stand-in apiserver's readiness."""
