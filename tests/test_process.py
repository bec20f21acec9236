"""The program runner (``roleserve_core.process``), with real processes.

Every program here is a small shell script the test writes to its ``tmp_path``. Tests wait
on real state under a timeout: a line reaching the log (``Captured.wait_for``), a
runnable's status, or processes being gone (``wait_gone``, which reads ``/proc``; on this
machine orphans are reaped by PID 1 only after seconds, so a zombie counts as gone).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterable
from itertools import count
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import pytest

from roleserve_core.process import (
    Bind,
    PortInUseError,
    ProcessRecord,
    ProgramError,
    ProgramExitedError,
    ProgramNotFoundError,
    ProgramSpec,
    parse_zap_json,
    plain_text,
    program_runnable,
    read_record,
    resolve_binary,
    start_program,
    zap_json_parser,
)
from roleserve_core.process._proc import boot_id, group_members, read_stat, read_stats
from roleserve_core.process._watchdog import watchdog
from roleserve_core.supervisor import FailureKind, RunContext, State, classify_failure
from roleserve_core.testing import (
    DEFAULT_TIMEOUT,
    SupervisorRunner,
    mounted_tmpfs,
    poll_until,
    random_loopback,
    wait_for_state,
    wait_for_status,
)

pytestmark = pytest.mark.anyio

_loggers = count()


class Captured(logging.Handler):
    """A logger of the test's own whose records a test can wait for."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._changed = anyio.Event()
        self.log = logging.getLogger(f"test_process.{next(_loggers)}")
        self.log.setLevel(logging.DEBUG)
        self.log.propagate = False
        self.log.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self._changed.set()
        self._changed = anyio.Event()

    def lines(self, level: int | None = None) -> list[str]:
        return [r.getMessage() for r in self.records if level is None or r.levelno == level]

    async def wait_for(self, predicate: Callable[[str], bool]) -> str:
        """The first message ``predicate`` accepts, once logged."""
        with anyio.fail_after(DEFAULT_TIMEOUT):
            while True:
                for record in self.records:
                    if predicate(record.getMessage()):
                        return record.getMessage()
                await self._changed.wait()


def script(tmp_path: Path, body: str, name: str = "prog.sh") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def spec_of(tmp_path: Path, program: Path, **options: Any) -> ProgramSpec:
    options.setdefault("stop_grace", 2.0)
    return ProgramSpec(
        name="prog", executable=str(program), state_dir=tmp_path / "state", **options
    )


def alive(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and not stat.gone


async def wait_gone(pids: Iterable[int]) -> None:
    """Wait until none of ``pids`` is alive; polled, since they are not our children."""
    pids = list(pids)

    async def living() -> list[int]:
        return [pid for pid in pids if alive(pid)]

    await poll_until(f"processes {pids} gone", living, lambda left: not left)


def pids_in(message: str) -> list[int]:
    return [int(word) for word in message.split() if word.isdigit()]


# ---------------------------------------------------------------- output into the log


async def test_output_lines_reach_the_log_and_stopping_leaves_nothing(tmp_path: Path) -> None:
    program = script(
        tmp_path,
        """\
        echo "hello from stdout"
        printf 'no newline at the end'
        echo "hello from stderr" >&2
        exec sleep 600
        """,
    )
    captured = Captured()
    spec = spec_of(tmp_path, program)
    async with start_program(captured.log, spec) as running:
        # Once stderr's line is in, stdout's partial line is in its pipe: the stop flushes it.
        await captured.wait_for(lambda m: m == "hello from stderr")
        await captured.wait_for(lambda m: m == "hello from stdout")
        assert running.running
        assert not running.exited.is_set()
        record = read_record(spec.record_path)
        assert (record.pid, record.pgid) == (running.pid, running.pid)
        assert record.start_time == running.start_time == read_stat(running.pid).start_time  # type: ignore[union-attr]
        assert record.executable == str(program)
    # The block returned: the program was stopped (SIGTERM), reaped, its record removed.
    assert running.returncode == -signal.SIGTERM
    assert not alive(running.pid)
    assert not spec.record_path.exists()
    assert "no newline at the end" in captured.lines(logging.INFO)


async def test_a_parser_decides_the_level_and_a_failing_parser_loses_nothing(
    tmp_path: Path,
) -> None:
    def parser(line: str) -> tuple[int, str]:
        if line == "boom":
            raise ValueError("a buggy plugin parser")
        return logging.WARNING, line.upper()

    program = script(tmp_path, "echo quiet; echo boom; exec sleep 600\n")
    captured = Captured()
    async with start_program(captured.log, spec_of(tmp_path, program, parser=parser)):
        await captured.wait_for(lambda m: m == "boom")
    assert "QUIET" in captured.lines(logging.WARNING)
    assert "boom" in captured.lines(logging.INFO)


def test_the_zap_json_parser_reads_etcd_lines() -> None:
    info = '{"level":"info","ts":"2026-12-03T08:00:00Z","caller":"x.go:1","msg":"ready","n":3}'
    warn = '{"level":"warn","ts":"t","msg":"slow fdatasync","took":"1.2s"}'
    assert parse_zap_json(info) == (logging.DEBUG, "ready n=3")
    assert zap_json_parser(info_level=logging.INFO)(info) == (logging.INFO, "ready n=3")
    assert parse_zap_json(warn) == (logging.WARNING, "slow fdatasync took=1.2s")
    assert parse_zap_json("panic: runtime error") == (logging.CRITICAL, "panic: runtime error")
    assert parse_zap_json("a banner") == (logging.INFO, "a banner")
    assert parse_zap_json("[1, 2]") == (logging.INFO, "[1, 2]")
    assert plain_text("x") == (logging.INFO, "x")


async def test_as_a_runnable_its_output_is_in_the_log_tree_at_its_dn(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    program = script(tmp_path, 'echo "serving"; exec sleep 600\n')

    async def ready(running: Any, ctx: RunContext) -> None:
        assert alive(running.pid)

    async def root(ctx: RunContext) -> None:
        ctx.run("prog", program_runnable(spec_of(tmp_path, program), ready=ready))
        ctx.signal_healthy()
        await anyio.sleep_forever()

    supervisor = await supervisor_runner.start(root)
    status = await wait_for_state(supervisor, "root.prog")
    pid = pids_in(status.note)[0]
    assert alive(pid)
    with anyio.fail_after(DEFAULT_TIMEOUT), supervisor.logtree.follow("root.prog") as follower:
        messages = [e.message for e in supervisor.logtree.entries("root.prog")]
        while "serving" not in messages:
            messages.append((await follower.next()).message)
    await supervisor_runner.stop(supervisor)
    assert not alive(pid)


async def test_a_full_disk_under_its_record_is_one_line_naming_it(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    """Issue 28: node_exporter's runnable, its state directory on a full disk, failed with a
    traceback. A full disk is a refusal of the environment: one ERROR line naming the file
    and its filesystem, and the runnable waits (retried after the backoff)."""
    program = script(tmp_path, "exec sleep 600\n")
    with mounted_tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        disk.fill()
        spec = ProgramSpec(name="prog", executable=str(program), state_dir=disk.path)

        async def root(ctx: RunContext) -> None:
            ctx.run("prog", program_runnable(spec))
            ctx.signal_healthy()
            await anyio.sleep_forever()

        supervisor = await supervisor_runner.start(root)
        await wait_for_status(supervisor, "root.prog", lambda s: s.restart_in is not None)
        await supervisor_runner.stop(supervisor)
    [entry] = [e for e in supervisor.logtree.entries("root.prog") if e.level_name == "ERROR"]
    assert entry.exc_text is None
    assert entry.message.startswith(
        f"waiting for the operator: no space left on the filesystem mounted at {disk.path} "
        f"(writing {disk.path / 'prog.process.json'}): No space left on device; free space "
        "there, and this starts again by itself; restarting in "
    ), entry.message


# ---------------------------------------------------------------- exits and errors


async def test_exit_status_and_last_error_lines_make_the_error(tmp_path: Path) -> None:
    lines = [f'{{"level":"error","msg":"failure {i}"}}' for i in range(5)]
    program = script(
        tmp_path,
        "".join(f"echo '{line}' >&2\n" for line in lines)
        + '{"level":"info","msg":"not an error"}\n'.join(["echo '", "'\n"])
        + "exit 3\n",
    )
    captured = Captured()
    with pytest.raises(ProgramExitedError) as caught:
        async with start_program(
            captured.log, spec_of(tmp_path, program, parser=parse_zap_json)
        ) as running:
            await running.wait()
    error = caught.value
    assert error.returncode == 3
    assert error.lines == ("failure 2", "failure 3", "failure 4")
    assert str(error) == "prog exited with status 3: failure 2; failure 3; failure 4"
    assert not (tmp_path / "state" / "prog.process.json").exists()


async def test_without_error_lines_the_last_output_makes_the_error(tmp_path: Path) -> None:
    program = script(tmp_path, "echo one; echo two; echo 'bad flag --x' >&2; kill -KILL $$\n")
    with pytest.raises(ProgramExitedError, match=r"ended by signal SIGKILL: .*bad flag --x"):
        async with start_program(Captured().log, spec_of(tmp_path, program)) as running:
            await running.wait()


async def test_an_exit_cancels_the_block_whatever_it_waits_for(tmp_path: Path) -> None:
    """A readiness check that never succeeds still ends when the program exits."""
    program = script(tmp_path, "read line; echo 'gave up' >&2; exit 1\n")
    with pytest.raises(ProgramExitedError, match="status 1: gave up"):
        async with start_program(Captured().log, spec_of(tmp_path, program)):
            await anyio.sleep_forever()


async def test_the_callers_own_error_passes_unwrapped_and_the_program_stops(
    tmp_path: Path,
) -> None:
    program = script(tmp_path, "exec sleep 600\n")
    with pytest.raises(KeyError, match="the caller's"):
        async with start_program(Captured().log, spec_of(tmp_path, program)) as running:
            raise KeyError("the caller's")
    assert not alive(running.pid)


async def test_a_dead_runnable_shows_the_programs_exit(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    program = script(tmp_path, "echo 'cannot open the data directory' >&2; exit 2\n")

    async def root(ctx: RunContext) -> None:
        ctx.run("prog", program_runnable(lambda: spec_of(tmp_path, program)))
        ctx.signal_healthy()
        await anyio.sleep_forever()

    supervisor = await supervisor_runner.start(root)
    status = await wait_for_status(supervisor, "root.prog", lambda s: s.failures >= 1)
    assert status.last_error is not None
    assert status.last_error.type.endswith("ProgramExitedError")
    assert status.last_error.message == "prog exited with status 2: cannot open the data directory"


# ---------------------------------------------------------------- stopping


async def test_a_program_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    program = script(tmp_path, "trap '' TERM\necho ready\nwhile :; do sleep 1; done\n")
    captured = Captured()
    with anyio.CancelScope() as scope:
        async with start_program(
            captured.log, spec_of(tmp_path, program, stop_grace=0.2)
        ) as running:
            await captured.wait_for(lambda m: m == "ready")
            scope.cancel()
            await anyio.sleep_forever()
    assert running.returncode == -signal.SIGKILL
    assert group_members(running.pgid) == []
    assert any("did not stop within 0.2s of SIGTERM" in m for m in captured.lines(logging.WARNING))


FORKS_A_GRANDCHILD = """\
sleep 600 &
sh -c "trap '' TERM; echo \\$\\$ > grandchild.started; while :; do sleep 1; done" &
until [ -s grandchild.started ]; do sleep 0.01; done
echo "pids $$ $! $(cat grandchild.started)"
wait
"""


async def test_a_cancelled_program_leaves_no_grandchild(tmp_path: Path) -> None:
    program = script(tmp_path, FORKS_A_GRANDCHILD)
    captured = Captured()
    spec = spec_of(tmp_path, program, cwd=tmp_path, stop_grace=0.3)
    with anyio.CancelScope() as scope:
        async with start_program(captured.log, spec) as running:
            pids = pids_in(await captured.wait_for(lambda m: m.startswith("pids")))
            assert all(alive(pid) for pid in pids)
            scope.cancel()
    # Returned only once every process of the group was gone.
    assert not any(alive(pid) for pid in pids)
    assert group_members(running.pgid) == []


async def test_a_program_that_exits_leaves_no_grandchild(tmp_path: Path) -> None:
    program = script(
        tmp_path, 'sleep 600 &\necho "pids $$ $!"\nuntil [ -e go ]; do sleep 0.01; done\nexit 4\n'
    )
    captured = Captured()
    pids: list[int] = []

    async def run() -> None:
        spec = spec_of(tmp_path, program, cwd=tmp_path)
        async with start_program(captured.log, spec) as running:
            pids.extend(pids_in(await captured.wait_for(lambda m: m.startswith("pids"))))
            (tmp_path / "go").touch()
            await running.wait()

    with pytest.raises(ProgramExitedError, match="status 4") as caught:
        await run()
    assert caught.value.returncode == 4
    assert len(pids) == 2
    assert not any(alive(pid) for pid in pids)


NODE = """\
import sys
from pathlib import Path

import anyio

from roleserve_core.process import ProgramSpec, start_program
import logging

async def main() -> None:
    spec = ProgramSpec(name="prog", executable=sys.argv[1], state_dir=Path(sys.argv[2]),
                       cwd=Path(sys.argv[2]).parent)
    log = logging.getLogger("node")
    async with start_program(log, spec) as running:
        await running.wait()

anyio.run(main)
"""


@contextlib.asynccontextmanager
async def node_running_a_forking_program(
    tmp_path: Path,
) -> AsyncIterator[tuple[anyio.abc.Process, ProcessRecord]]:
    """A node process (a Python process running the runner) whose program forked its
    grandchildren; the node and the program's record, once all have started."""
    program = script(tmp_path, FORKS_A_GRANDCHILD)
    (tmp_path / "node.py").write_text(NODE)
    state = tmp_path / "state"
    command = [sys.executable, str(tmp_path / "node.py"), str(program), str(state)]
    async with await anyio.open_process(command, stdout=subprocess.DEVNULL) as node:

        async def started() -> bool:
            marker = tmp_path / "grandchild.started"
            return (
                marker.exists()
                and marker.stat().st_size > 0
                and (state / "prog.process.json").exists()
            )

        await poll_until("the program and its grandchildren started", started)
        yield node, read_record(state / "prog.process.json")


async def test_a_sigkilled_node_leaves_no_program_and_no_grandchild(tmp_path: Path) -> None:
    """The node process is SIGKILLed: the program dies of its death signal, its
    grandchildren by the watchdog; the record stays behind and the next start drops it
    without signalling anything."""
    async with node_running_a_forking_program(tmp_path) as (node, record):
        grandchildren = [pid for pid in group_members(record.pgid) if pid != record.pid]
        assert len(grandchildren) >= 2
        node.send_signal(signal.SIGKILL)
        assert await node.wait() == -signal.SIGKILL
    await wait_gone([record.pid, *grandchildren])
    assert group_members(record.pgid) == []
    # The record of the killed run is still there; the next start finds its process gone.
    captured = Captured()
    async with start_program(
        captured.log, spec_of(tmp_path, script(tmp_path, "exec sleep 600\n", "p2.sh"))
    ):
        pass
    assert captured.lines(logging.WARNING) == []
    assert any("of an earlier run" in m for m in captured.lines(logging.INFO))


async def test_the_death_signal_alone_takes_the_program_with_the_node(tmp_path: Path) -> None:
    """With the node's watchdog killed first, the program still dies with the node (its
    death signal); its grandchildren do not, which is what the watchdog is for."""
    async with node_running_a_forking_program(tmp_path) as (node, record):
        grandchildren = [pid for pid in group_members(record.pgid) if pid != record.pid]
        looping = int((tmp_path / "grandchild.started").read_text())  # runs until killed
        try:
            (watchdog_pid,) = _children_named(node.pid, "roleserve-watchdog")
            os.kill(watchdog_pid, signal.SIGKILL)
            node.send_signal(signal.SIGKILL)
            await node.wait()
            await wait_gone([record.pid])
            assert alive(looping)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.pgid, signal.SIGKILL)
    await wait_gone(grandchildren)


def _children_named(parent: int, name: str) -> list[int]:
    found = []
    for stat in read_stats():
        try:
            argv0 = Path(f"/proc/{stat.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if stat.ppid == parent and argv0 == name:
            found.append(stat.pid)
    return found


# ---------------------------------------------------------------- leftovers


def _record_of(process: anyio.abc.Process, path: Path, start_shift: int = 0) -> None:
    stat = read_stat(process.pid)
    assert stat is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    ProcessRecord(
        pid=process.pid,
        pgid=process.pid,
        start_time=stat.start_time + start_shift,
        boot_id=boot_id(),
        executable="/bin/sleep",
        arguments=["600"],
        node_pid=12345,
    ).write(path)


async def test_a_recorded_leftover_is_stopped_at_start(tmp_path: Path) -> None:
    async with await anyio.open_process(["sleep", "600"], start_new_session=True) as leftover:
        spec = spec_of(tmp_path, script(tmp_path, "exec sleep 600\n"))
        _record_of(leftover, spec.record_path)
        captured = Captured()
        async with start_program(captured.log, spec) as running:
            # It was stopped before the new one started: SIGTERM did it.
            with anyio.fail_after(DEFAULT_TIMEOUT):
                assert await leftover.wait() == -signal.SIGTERM
            assert read_record(spec.record_path).pid == running.pid
        warnings = captured.lines(logging.WARNING)
        assert len(warnings) == 1
        assert f"pid {leftover.pid} (sleep 600)" in warnings[0]
        assert "left running by an earlier run" in warnings[0]


LISTENER = """\
import socket, sys, time
listener = socket.socket()
listener.bind((sys.argv[1], 0))
listener.listen()
print(listener.getsockname()[1], flush=True)
time.sleep(600)
"""


LISTENER_WHEN_TOLD = """\
import os, socket, sys, time
while not os.path.exists(sys.argv[3]):
    time.sleep(0.01)
listener = socket.socket()
listener.bind((sys.argv[1], int(sys.argv[2])))
listener.listen()
time.sleep(600)
"""
"""Listens on host:port (its arguments) once the file named third exists."""


async def test_without_a_ready_check_a_program_is_healthy_only_once_it_listens(
    tmp_path: Path, supervisor_runner: SupervisorRunner
) -> None:
    """Started is not running: with binds and no ``ready``, the runnable waits (NEW) until
    the program itself holds its addresses."""
    host = str(random_loopback())
    with socket.socket() as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    go = tmp_path / "go"
    arguments = ["-c", LISTENER_WHEN_TOLD, host, str(port), str(go)]
    spec = spec_of(tmp_path, Path(sys.executable), arguments=arguments, binds=[Bind(host, port)])

    async def root(ctx: RunContext) -> None:
        ctx.run("prog", program_runnable(spec))
        ctx.signal_healthy()
        await anyio.sleep_forever()

    supervisor = await supervisor_runner.start(root)
    waiting = await wait_for_status(supervisor, "root.prog", lambda s: "listen" in s.note)
    assert waiting.state is State.NEW
    assert waiting.note.startswith(f"waiting for prog to listen on {host}:{port}/tcp (pid ")
    go.touch()
    healthy = await wait_for_state(supervisor, "root.prog")
    assert healthy.note.startswith("prog running, pid ")


async def test_a_recorded_leftover_holding_the_address_is_stopped_and_the_start_succeeds(
    tmp_path: Path,
) -> None:
    """The issue's case: a killed node's orphan still listens on the program's address.
    Recorded, it is stopped and the new program starts; the address check comes after."""
    host = str(random_loopback())
    command = [sys.executable, "-c", LISTENER, host]
    async with await anyio.open_process(command, start_new_session=True) as orphan:
        assert orphan.stdout is not None
        with anyio.fail_after(DEFAULT_TIMEOUT):
            port = int((await orphan.stdout.receive()).decode())
        program = script(tmp_path, "exec sleep 600\n")
        spec = spec_of(tmp_path, program, binds=[Bind(host, port)])
        _record_of(orphan, spec.record_path)
        captured = Captured()
        async with start_program(captured.log, spec) as running:
            with anyio.fail_after(DEFAULT_TIMEOUT):
                assert await orphan.wait() == -signal.SIGTERM
            assert running.running
        assert len(captured.lines(logging.WARNING)) == 1


async def test_readiness_against_the_child_sees_its_own_listener_not_anothers(
    tmp_path: Path,
) -> None:
    """``listens_on`` is true for the program's own listener; a socket of another process
    on the program's other address does not count, and an exited program holds nothing."""
    host = str(random_loopback())
    spec = spec_of(tmp_path, Path(sys.executable), arguments=["-c", LISTENER, host])
    captured = Captured()
    with socket.socket() as stranger:
        stranger.bind((host, 0))
        stranger.listen()
        theirs = Bind(host, stranger.getsockname()[1])
        async with start_program(captured.log, spec) as running:
            port = int(await captured.wait_for(str.isdigit))
            assert running.listens_on(Bind(host, port))
            assert not running.listens_on(theirs)
        assert not running.listens_on(Bind(host, port))


async def test_a_record_whose_pid_is_now_another_process_is_not_signalled(
    tmp_path: Path,
) -> None:
    async with await anyio.open_process(["sleep", "600"], start_new_session=True) as stranger:
        spec = spec_of(tmp_path, script(tmp_path, "exec sleep 600\n"))
        _record_of(stranger, spec.record_path, start_shift=-1)  # its pid, not its start
        captured = Captured()
        async with start_program(captured.log, spec) as running:
            assert read_record(spec.record_path).pid == running.pid
        assert stranger.returncode is None
        assert alive(stranger.pid)
        assert captured.lines(logging.WARNING) == []
        assert any("its pid is not ours" in m for m in captured.lines(logging.INFO))
        stranger.kill()


async def test_an_unreadable_record_is_dropped_with_a_warning(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, script(tmp_path, "exec sleep 600\n"))
    spec.state_dir.mkdir()
    spec.record_path.write_text('{"pid": "one"')
    captured = Captured()
    async with start_program(captured.log, spec):
        pass
    assert any("unreadable record" in m for m in captured.lines(logging.WARNING))


# ---------------------------------------------------------------- held ports


@pytest.mark.parametrize("protocol", ["tcp", "udp"])
async def test_an_unrelated_listener_is_reported_and_left_alone(
    tmp_path: Path, protocol: Literal["tcp", "udp"]
) -> None:
    host = str(random_loopback())
    kind = socket.SOCK_STREAM if protocol == "tcp" else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as listener:
        listener.bind((host, 0))
        if protocol == "tcp":
            listener.listen()
        port = listener.getsockname()[1]
        program = script(tmp_path, "echo started > started\nexec sleep 600\n")
        spec = spec_of(
            tmp_path,
            program,
            cwd=tmp_path,
            binds=[
                Bind(host, port + 1 if port < 65535 else 1, protocol),
                Bind(host, port, protocol),
            ],
        )
        with pytest.raises(PortInUseError) as caught:
            async with start_program(Captured().log, spec):
                pytest.fail("the program must not start")
        message = str(caught.value)
        assert caught.value.address == f"{host}:{port}/{protocol}"
        assert caught.value.holder_pid == os.getpid()
        assert f"{host}:{port}/{protocol} is held by pid {os.getpid()} (" in message
        assert "which this node did not start; stop that process" in message
        assert "\n" not in message
        assert not (tmp_path / "started").exists()
        # Left alone: the listener is still ours and still works.
        if protocol == "tcp":
            with socket.create_connection((host, port), timeout=DEFAULT_TIMEOUT):
                pass


async def test_a_free_address_passes_and_a_wildcard_listener_counts(tmp_path: Path) -> None:
    host = str(random_loopback())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        spec = spec_of(tmp_path, script(tmp_path, "exec sleep 600\n"), binds=[Bind(host, port)])
        with pytest.raises(PortInUseError, match=f"pid {os.getpid()}"):
            async with start_program(Captured().log, spec):
                pass
    async with start_program(Captured().log, spec) as running:
        assert running.running


async def test_an_address_not_on_this_machine_is_one_clear_error(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, script(tmp_path, "exec sleep 600\n"), binds=[Bind("192.0.2.1", 80)])
    with pytest.raises(ProgramError, match=r"192\.0\.2\.1 is not an address of this machine"):
        async with start_program(Captured().log, spec):
            pass


# ---------------------------------------------------------------- the binary


async def test_a_missing_binary_fails_at_once_naming_the_paths_tried(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "prog").write_text("not executable")
    spec = ProgramSpec(
        name="prog",
        executable="prog",
        state_dir=tmp_path / "state",
        fallbacks=[tmp_path / "wheel" / "prog"],
        setting='set `prog = "/path/to/prog"` in [plugins.example] of roleserve.toml',
    )
    with pytest.raises(ProgramNotFoundError) as caught:
        resolve_binary(spec, search_path=f"{tmp_path}/nowhere:{tmp_path}/bin")
    assert str(caught.value) == (
        f"cannot start prog: no executable prog; tried {tmp_path}/nowhere/prog (PATH, not found),"
        f" {tmp_path}/bin/prog (PATH, not executable), {tmp_path}/wheel/prog (fallback, not found);"
        ' set `prog = "/path/to/prog"` in [plugins.example] of roleserve.toml'
    )
    configured = ProgramSpec(
        name="prog", executable="sh", configured=tmp_path / "bin" / "prog", state_dir=tmp_path
    )
    with pytest.raises(
        ProgramNotFoundError, match=r"tried .*/bin/prog \(configured, not executable\)$"
    ) as missing:
        async with start_program(Captured().log, configured):
            pass
    assert not (tmp_path / "state").exists()  # nothing was started or recorded
    # Final: the supervisor leaves the runnable failed until the operator acts.
    assert classify_failure(missing.value) is FailureKind.FINAL


async def test_the_binary_is_found_on_path_or_as_a_fallback(tmp_path: Path) -> None:
    program = script(tmp_path, "exit 0\n")
    spec = ProgramSpec(name="prog", executable="prog.sh", state_dir=tmp_path)
    assert resolve_binary(spec, search_path=f"/nonexistent:{tmp_path}") == program
    fallback = ProgramSpec(
        name="prog", executable="no-such-prog", fallbacks=[program], state_dir=tmp_path
    )
    assert resolve_binary(fallback, search_path="/nonexistent") == program


def test_a_spec_refuses_a_bad_name_or_address(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="program name"):
        ProgramSpec(name="../etc", executable="x", state_dir=tmp_path)
    with pytest.raises(ValueError, match="not-an-ip"):
        Bind("not-an-ip", 80)
    with pytest.raises(ValueError, match="port"):
        Bind("127.0.0.1", 0)


async def test_the_watchdog_is_one_process_for_every_program(tmp_path: Path) -> None:
    first = script(tmp_path, "exec sleep 600\n", "a.sh")
    second = script(tmp_path, "exec sleep 600\n", "b.sh")
    async with start_program(Captured().log, spec_of(tmp_path, first)):
        pid = watchdog.pid
        async with start_program(
            Captured().log, ProgramSpec(name="b", executable=str(second), state_dir=tmp_path)
        ):
            assert watchdog.pid == pid is not None
    assert alive(pid)


async def test_a_program_that_cannot_be_recorded_does_not_run(tmp_path: Path) -> None:
    program = script(tmp_path, "echo $$ > pid; exec sleep 600\n")
    spec = spec_of(tmp_path, program, cwd=tmp_path)
    spec.state_dir.mkdir()
    spec.record_path.mkdir()  # a directory where the record file must go
    with pytest.raises(IsADirectoryError):
        async with start_program(Captured().log, spec):
            pytest.fail("the program must not run unrecorded")
    await wait_gone([int((tmp_path / "pid").read_text())] if (tmp_path / "pid").exists() else [])


async def test_one_name_runs_once_per_node_process(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, script(tmp_path, "exec sleep 600\n"))
    async with start_program(Captured().log, spec) as first:
        with pytest.raises(ProgramError, match="already running from this node process"):
            async with start_program(Captured().log, spec):
                pass
        assert first.running
        assert read_record(spec.record_path).pid == first.pid


async def test_an_ipv6_listener_is_reported(tmp_path: Path) -> None:
    try:
        listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        listener.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    with listener:
        listener.listen()
        port = listener.getsockname()[1]
        spec = spec_of(tmp_path, script(tmp_path, "exec sleep 600\n"), binds=[Bind("::1", port)])
        with pytest.raises(
            PortInUseError, match=rf"\[::1\]:{port}/tcp is held by pid {os.getpid()}"
        ):
            async with start_program(Captured().log, spec):
                pass


def test_the_package_exports_its_api_documented_and_sorted() -> None:
    import roleserve_core.process as process

    assert process.__all__ == sorted(process.__all__)
    for name in process.__all__:
        obj = getattr(process, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):  # not the LineParser alias
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
