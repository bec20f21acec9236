"""How the supervisor treats a failure by its kind: final, expected, unexpected.

A ``FinalError`` is not restarted (it waits for the operator's ``restart``); an expected
failure is one WARNING line; an unexpected one is logged with its traceback. Every
supervisor runs on the fake clock with jitter-free backoff (``supervisor_runner``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import anyio
import grpc
import pytest
from grpc.aio import AioRpcError, Metadata

from roleserve_core import DiskFullError, ExpectedError, FinalError, ResourceError, write_atomically
from roleserve_core.supervisor import (
    WAITING_FOR_OPERATOR,
    FailureKind,
    RunContext,
    RunnableStatus,
    State,
    Supervisor,
    classify_failure,
)
from roleserve_core.testing import FakeClock, SupervisorRunner, wait_for_status, wait_for_value

pytestmark = pytest.mark.anyio

MISSING = "no etcd binary found; install it"


class Failing:
    """A child runnable that raises what ``error()`` makes on each run, until told to serve."""

    def __init__(self, error: Callable[[], BaseException]) -> None:
        self.error = error
        self.runs = 0
        self.serve = False

    async def __call__(self, ctx: RunContext) -> None:
        self.runs += 1
        if self.serve:
            ctx.signal_healthy()
            await anyio.sleep_forever()
        raise self.error()


def parent_of(children: dict[str, Callable[[RunContext], object]]) -> Callable[..., object]:
    async def parent(ctx: RunContext) -> None:
        ctx.run_group(children)  # type: ignore[arg-type]
        ctx.signal_healthy()
        await anyio.sleep_forever()

    return parent


async def serve(ctx: RunContext) -> None:
    ctx.signal_healthy()
    await anyio.sleep_forever()


def rpc_error(code: grpc.StatusCode, details: str) -> AioRpcError:
    return AioRpcError(code, Metadata(), Metadata(), details)


async def start_with(runner: SupervisorRunner, **children: Callable[..., object]) -> Supervisor:
    return await runner.start(parent_of(children))  # type: ignore[arg-type]


async def final_status(supervisor: Supervisor, dn: str) -> RunnableStatus:
    return await wait_for_status(supervisor, dn, lambda status: status.final)


# -- final failures ----------------------------------------------------------------------------


async def test_a_final_error_is_not_restarted_and_shows_as_final(
    supervisor_runner: SupervisorRunner, fake_clock: FakeClock
) -> None:
    failing = Failing(lambda: FinalError(MISSING))
    supervisor = await start_with(supervisor_runner, etcd=failing, sibling=serve)

    status = await final_status(supervisor, "root.etcd")
    assert status.state is State.DEAD
    assert status.note == MISSING
    assert status.restart_in is None
    assert status.last_error is not None
    assert status.last_error.summary() == f"roleserve_core.errors.FinalError: {MISSING}"
    # Siblings behave as for any death: cancelled, then restarted at once.
    await wait_for_status(
        supervisor, "root.sibling", lambda s: s.restarts == 1 and s.state is State.HEALTHY
    )
    fake_clock.advance(3600.0)  # far beyond any backoff
    await anyio.wait_all_tasks_blocked()
    assert failing.runs == 1
    assert supervisor.status_of("root.etcd").state is State.DEAD


async def test_a_final_error_inside_a_task_group_is_final(
    supervisor_runner: SupervisorRunner,
) -> None:
    async def grouped(ctx: RunContext) -> None:
        async with anyio.create_task_group():
            raise FinalError(MISSING)

    supervisor = await start_with(supervisor_runner, grouped=grouped)
    status = await final_status(supervisor, "root.grouped")
    assert status.note == MISSING


async def test_restart_starts_a_final_runnable_again_at_once(
    supervisor_runner: SupervisorRunner,
) -> None:
    failing = Failing(lambda: FinalError(MISSING))
    supervisor = await start_with(supervisor_runner, etcd=failing)
    await final_status(supervisor, "root.etcd")

    failing.serve = True  # the operator installed etcd
    supervisor.restart("root.etcd")
    status = await wait_for_status(supervisor, "root.etcd", lambda s: s.state is State.HEALTHY)
    assert not status.final
    assert status.note == ""
    assert failing.runs == 2


async def test_a_final_error_is_one_error_line_without_a_traceback(
    supervisor_runner: SupervisorRunner,
) -> None:
    supervisor = await start_with(supervisor_runner, etcd=Failing(lambda: FinalError(MISSING)))
    await final_status(supervisor, "root.etcd")

    entries = supervisor.logtree.entries("root.etcd")
    assert [(e.level_name, e.message, e.exc_text) for e in entries] == [
        ("ERROR", f"failed for good, not restarting: {MISSING}", None)
    ]
    assert "root.etcd" not in " ".join(e.message for e in supervisor.logtree.entries("supervisor"))


async def test_final_failures_tell_the_node_process(supervisor_runner: SupervisorRunner) -> None:
    supervisor = await start_with(supervisor_runner, etcd=Failing(lambda: FinalError(MISSING)))
    status = await wait_for_value(supervisor.final_failures)
    assert (status.dn, status.note, status.final) == ("root.etcd", MISSING, True)


# -- expected and unexpected failures ----------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        ExpectedError("the curator closed the heartbeat stream"),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        rpc_error(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"),
        rpc_error(grpc.StatusCode.CANCELLED, "Locally cancelled by application!"),
        ExceptionGroup("unhandled errors", [ExpectedError("a"), ConnectionResetError()]),
        ResourceError("not enough free space"),
    ],
    ids=["marked", "refused", "unavailable", "cancelled", "group", "resource"],
)
def test_expected_failures(error: BaseException) -> None:
    assert classify_failure(error) is FailureKind.EXPECTED


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("bug"),
        rpc_error(grpc.StatusCode.PERMISSION_DENIED, "not an owner"),
        ExceptionGroup("unhandled errors", [ExpectedError("a"), KeyError("b")]),
    ],
    ids=["bug", "denied", "mixed-group"],
)
def test_unexpected_failures(error: BaseException) -> None:
    assert classify_failure(error) is FailureKind.UNEXPECTED


def test_a_final_error_wins_over_anything_else() -> None:
    group = ExceptionGroup("unhandled errors", [RuntimeError("x"), FinalError(MISSING)])
    assert classify_failure(group) is FailureKind.FINAL


async def test_an_expected_failure_is_one_warning_line_and_keeps_its_traceback(
    supervisor_runner: SupervisorRunner,
) -> None:
    error = rpc_error(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
    supervisor = await start_with(supervisor_runner, fetch=Failing(lambda: error))
    status = await wait_for_status(supervisor, "root.fetch", lambda s: s.restart_in is not None)

    entries = supervisor.logtree.entries("root.fetch")
    assert len(entries) == 1
    assert entries[0].level_name == "WARNING"
    assert entries[0].exc_text is None
    assert entries[0].message.startswith("runnable failed: grpc.aio._call.AioRpcError: ")
    assert entries[0].message.endswith("; restarting in 0.50s")
    assert status.last_error is not None
    assert "Traceback (most recent call last)" in status.last_error.traceback


async def test_an_unexpected_failure_is_an_error_with_its_traceback(
    supervisor_runner: SupervisorRunner,
) -> None:
    supervisor = await start_with(supervisor_runner, bug=Failing(lambda: KeyError("nodes")))
    await wait_for_status(supervisor, "root.bug", lambda s: s.restart_in is not None)

    [entry] = supervisor.logtree.entries("root.bug")
    assert (entry.level_name, entry.message) == (
        "ERROR",
        "runnable failed: KeyError: 'nodes'; restarting in 0.50s",
    )
    assert entry.exc_text is not None
    assert "Traceback (most recent call last)" in entry.exc_text


async def test_a_resource_error_is_one_error_line_for_the_operator_and_is_retried(
    supervisor_runner: SupervisorRunner, fake_clock: FakeClock
) -> None:
    """Too little disk space, say: the runnable keeps trying (the operator may free space at
    any time), one ERROR line per try that tools find by its start, no traceback."""
    full = "not enough free space in /var/lib/x: 1 byte free, 2 needed"
    failing = Failing(lambda: ResourceError(full))
    supervisor = await start_with(supervisor_runner, etcd=failing)
    status = await wait_for_status(supervisor, "root.etcd", lambda s: s.restart_in is not None)
    assert not status.final

    [entry] = supervisor.logtree.entries("root.etcd")
    assert (entry.level_name, entry.message, entry.exc_text) == (
        "ERROR",
        f"{WAITING_FOR_OPERATOR}{full}; restarting in 0.50s",
        None,
    )
    failing.serve = True  # the operator freed space
    fake_clock.advance(0.5)
    await wait_for_status(supervisor, "root.etcd", lambda s: s.state is State.HEALTHY)
    assert failing.runs == 2


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device"),
            "a filesystem of this node is full: No space left on device; free space there, "
            "and this starts again by itself",
        ),
        (
            OSError(errno.EDQUOT, "Disk quota exceeded", "/nonexistent/roleserve/x.json"),
            "no space left on the filesystem mounted at / (writing "
            "/nonexistent/roleserve/x.json): Disk quota exceeded; free space there, and this "
            "starts again by itself",
        ),
    ],
    ids=["enospc", "edquot-with-its-file"],
)
async def test_a_full_disk_is_one_error_line_for_the_operator_not_a_traceback(
    supervisor_runner: SupervisorRunner, error: OSError, message: str
) -> None:
    """Issue 28: containerd's and node_exporter's runnables logged a full disk's OSError with
    a traceback. A full disk is a refusal of the environment: one line, retried."""
    supervisor = await start_with(supervisor_runner, disk=Failing(lambda: error))
    await wait_for_status(supervisor, "root.disk", lambda s: s.restart_in is not None)
    [entry] = supervisor.logtree.entries("root.disk")
    assert (entry.level_name, entry.message, entry.exc_text) == (
        "ERROR",
        f"{WAITING_FOR_OPERATOR}{message}; restarting in 0.50s",
        None,
    )


def test_a_full_disk_met_by_write_atomically_is_still_the_oserror_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin API promise: ``write_atomically`` raised an ``OSError`` on a full disk,
    and a plugin's ``except OSError`` (the hostsfile plugin's, for one) must still catch the
    ``DiskFullError`` it raises now, with the cause's errno, and the one line as its text."""

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    path = tmp_path / "state.json"
    with pytest.raises(OSError, match=r"^no space left on the filesystem mounted at") as failed:
        write_atomically(path, b"{}")
    assert isinstance(failed.value, DiskFullError)
    assert (failed.value.errno, failed.value.strerror) == (errno.ENOSPC, "No space left on device")
    assert str(failed.value).startswith(
        f"no space left on the filesystem mounted at / (writing {path})"
    )
