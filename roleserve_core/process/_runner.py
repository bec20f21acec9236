"""Starting, watching and stopping one program: ``start_program`` and ``program_runnable``.

::

    start_program(log, spec)
    ├── binary: configured, PATH, fallbacks ──▶ none: ProgramNotFoundError (final)
    ├── a record of a killed run, provably that process ──▶ SIGTERM/grace/SIGKILL, WARNING
    ├── spec.binds: each bound and released ──▶ held: PortInUseError naming the holder
    ├── spawn (shielded, from the event loop's thread):
    │     setpriv --pdeathsig KILL -- BINARY ARGS...    in a new session (pgid = pid)
    │     then at once: record written, group told to the node's watchdog
    ├── body runs with RunningProgram (pid, exited, returncode) ── readiness is the caller's
    │     output: stdout and stderr, line by line through spec.parser into ``log``
    │     program exits by itself ──▶ body cancelled, ProgramExitedError(status, last errors)
    └── on the way out, whatever the reason (shielded): SIGTERM to the group, spec.stop_grace,
          SIGKILL to the group; returns once the program is reaped and its group is empty;
          record removed, watchdog told

Death with the node, and why this way: a death signal needs ``prctl(PR_SET_PDEATHSIG)`` in
the child between fork and exec. ``subprocess``'s ``preexec_fn`` could call it, but runs
Python in a forked child of a threaded process (grpc runs threads), which can deadlock;
util-linux's ``setpriv --pdeathsig KILL --`` does it in C and then execs the program, so the
program keeps setpriv's pid. The signal fires when the *thread* that forked exits, so the
spawn happens on the event loop's thread (asyncio forks there), never in a worker thread.
The death signal reaches the program alone; its helpers are the watchdog's (``_watchdog``).
``start_new_session`` (a ``setsid`` done by ``subprocess``'s C code, safe with threads) puts
each program in a session and process group of its own, which is what is stopped whole.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import anyio
import anyio.abc

from roleserve_core.process._errors import (
    ProgramError,
    ProgramExitedError,
    ProgramNotFoundError,
    describe_status,
)
from roleserve_core.process._ports import check_binds, holds
from roleserve_core.process._proc import boot_id, group_members, read_stat, wait_group_empty
from roleserve_core.process._records import KILL_TIMEOUT, ProcessRecord, stop_leftover
from roleserve_core.process._spec import Bind, ProgramSpec, resolve_binary
from roleserve_core.process._watchdog import watchdog

if TYPE_CHECKING:
    from roleserve_core.supervisor import RunContext, Runnable

__all__ = ["RunningProgram", "find_setpriv", "program_runnable", "start_program"]

MAX_LINE = 16384
"""Longer output lines are cut to this many characters (and marked with …)."""

DRAIN_TIMEOUT = 1.0
"""Seconds to wait for the last output after the group is gone: a helper that left the
group (its own ``setsid``) may still hold the output pipe."""

LISTEN_POLL = 0.05
"""Seconds between looks at whether a program holds its addresses yet (``program_runnable``
without ``ready``): nothing announces a socket another process binds."""


_active: set[Path] = set()
"""Record files of the programs this node process runs now: a second start of one would
take the first for a leftover and stop it."""


def find_setpriv() -> Path:
    """util-linux's ``setpriv``, which gives each program its death signal.

    :raises ProgramNotFoundError: if it is not installed.
    """
    found = shutil.which("setpriv") or shutil.which("setpriv", path="/usr/bin:/bin")
    if found is None:
        raise ProgramNotFoundError(
            "cannot start programs: util-linux's setpriv is not installed (it gives each "
            "program a death signal, so that none outlives the node); "
            "install util-linux (apt-get install util-linux)"
        )
    return Path(found)


class RunningProgram:
    """A program ``start_program`` started, for as long as its block runs.

    Judge readiness against this child: that ``exited`` is not set, and that what answers
    on the address is the program with this ``pid`` (etcd: the member ID and name it was
    started with), never merely that something answers.
    """

    def __init__(
        self,
        spec: ProgramSpec,
        binary: Path,
        process: anyio.abc.Process,
        start_time: int,
        log: logging.Logger,
    ) -> None:
        self.spec = spec
        self.binary = binary
        """The binary it runs."""
        self.pid = process.pid
        """Its pid (setpriv execs it, so this is the program's own)."""
        self.pgid = process.pid
        """Its process group (and session): the group the runner stops whole."""
        self.start_time = start_time
        """Its start time, from ``/proc/PID/stat``."""
        self.exited = anyio.Event()
        """Set once the program has exited (by itself, or stopped)."""
        self.returncode: int | None = None
        """Its exit status once it has exited; negative: killed by that signal."""
        self._process = process
        self._log = log
        self._errors: deque[str] = deque(maxlen=spec.error_lines)
        self._tail: deque[str] = deque(maxlen=spec.error_lines)
        self._stopping = False
        self._group_gone = False
        self._output_done = anyio.Event()
        self._output_scope: anyio.CancelScope | None = None

    @property
    def running(self) -> bool:
        """Whether it has not exited yet."""
        return self.returncode is None

    @property
    def last_errors(self) -> tuple[str, ...]:
        """Its last error lines (ERROR and above), oldest first."""
        return tuple(self._errors)

    def listens_on(self, bind: Bind) -> bool:
        """Whether this program (its own pid) holds a socket bound to ``bind``.

        A readiness check against the child: what answers on ``bind`` is this program, not
        an orphan or a stranger that took the address. False once it has exited.
        """
        return self.returncode is None and holds(self.pid, bind)

    def send_signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the program (e.g. SIGHUP to reload); nothing once it has exited."""
        if self.returncode is None:
            self._process.send_signal(sig)

    async def wait(self) -> NoReturn:
        """Wait for the program to exit; then raise ``ProgramExitedError``.

        Returns never: a program the node runs is meant to run until stopped.
        """
        await self.exited.wait()
        raise self.exit_error()

    def exit_error(self) -> ProgramExitedError:
        """The error its exit stands for: status and last error lines (or last output)."""
        assert self.returncode is not None, "the program is still running"
        return ProgramExitedError(
            self.spec.name, self.returncode, list(self._errors) or list(self._tail)
        )

    async def _wait_exit(self, body: anyio.CancelScope) -> None:
        self.returncode = await self._process.wait()
        if not group_members(self.pgid):
            self._group_gone = True  # from now on its number may be someone else's
        self.exited.set()
        if not self._stopping:
            body.cancel()

    async def _pump_output(self) -> None:
        """Both output pipes into the log until EOF; shielded, so that a program's last
        words while stopping are logged too. ``_finish_output`` ends it."""
        with anyio.CancelScope(shield=True) as scope:
            self._output_scope = scope
            try:
                async with anyio.create_task_group() as tasks:
                    for stream in (self._process.stdout, self._process.stderr):
                        assert stream is not None
                        tasks.start_soon(self._pump, stream)
            finally:
                self._output_done.set()

    async def _pump(self, stream: anyio.abc.ByteReceiveStream) -> None:
        pending = b""
        try:
            async for chunk in stream:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._line(line)
                if len(pending) > MAX_LINE:
                    self._line(pending)
                    pending = b""
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        if pending:
            self._line(pending)

    def _line(self, raw: bytes) -> None:
        text = raw.decode(errors="replace").rstrip("\r")
        if len(text) > MAX_LINE:
            text = text[:MAX_LINE] + "…"
        if not text.strip():
            return
        try:
            level, message = self.spec.parser(text)
        except Exception:  # a plugin's parser that fails must not lose the line
            level, message = logging.INFO, text
        self._log.log(level, "%s", message)
        self._tail.append(message)
        if level >= logging.ERROR:
            self._errors.append(message)

    async def _finish_output(self) -> None:
        with anyio.move_on_after(DRAIN_TIMEOUT):
            await self._output_done.wait()
        if self._output_scope is not None:
            self._output_scope.cancel()
        await self._output_done.wait()

    async def _stop(self) -> None:
        """SIGTERM to the group, grace, SIGKILL; until reaped and the group is empty."""
        self._stopping = True
        spec = self.spec
        if self._signal_group(signal.SIGTERM):
            with anyio.move_on_after(spec.stop_grace):
                await self._process.wait()
                await wait_group_empty(self.pgid)
        if self._process.returncode is None or group_members(self.pgid):
            self._log.warning(
                "%s did not stop within %ss of SIGTERM; killing its process group",
                spec.name,
                spec.stop_grace,
            )
            self._signal_group(signal.SIGKILL)
            await self._process.wait()
            if not await wait_group_empty(self.pgid, KILL_TIMEOUT):
                raise ProgramError(
                    f"cannot stop {spec.name}: its process group {self.pgid} still has "
                    f"{group_members(self.pgid)} {KILL_TIMEOUT}s after SIGKILL"
                )
        self._group_gone = True
        self.returncode = self._process.returncode
        self.exited.set()

    def _signal_group(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to the program's group while it can still be ours; False if the
        group is gone.

        The group's number stays ours while the leader is not reaped or any member is
        left; once the group has been seen empty, the number may be someone else's group,
        and it is never signalled again.
        """
        if self._group_gone:
            return False
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            self._group_gone = True
            return False
        return True


@asynccontextmanager
async def start_program(log: logging.Logger, spec: ProgramSpec) -> AsyncIterator[RunningProgram]:
    """Start ``spec``'s program; stop it when the block ends. See the module docstring.

    Typical use in a runnable::

        async def run(ctx: RunContext) -> None:
            async with start_program(ctx.log, spec) as program:
                await wait_until_ready(program)   # your check, against program.pid
                ctx.signal_healthy()
                await program.wait()              # raises ProgramExitedError

    If the program exits by itself, the block is cancelled and ``ProgramExitedError``
    (status, last error lines) is raised from it. However the block ends (returning,
    raising, cancelled), the program's group is stopped (SIGTERM, ``spec.stop_grace``,
    SIGKILL) before the block is left, shielded from cancellation.

    :raises ProgramNotFoundError: no binary (or no setpriv); final.
    :raises PortInUseError: an address in ``spec.binds`` is held by another process.
    :raises ProgramExitedError: the program exited while the block ran.
    """
    binary = resolve_binary(spec)
    setpriv = find_setpriv()
    if spec.record_path in _active:
        raise ProgramError(
            f"cannot start {spec.name}: it is already running from this node process "
            f"(its record {spec.record_path} is in use); give each program its own name"
        )
    _active.add(spec.record_path)
    try:
        program = await _spawn(log, spec, binary, setpriv)
        failure: BaseException | None = None
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(program._pump_output)
            try:
                with anyio.CancelScope() as body:
                    tasks.start_soon(program._wait_exit, body)
                    try:
                        yield program
                    except Exception as exc:
                        # Raised after the task group, so that the caller's own error is
                        # not wrapped in an ExceptionGroup.
                        failure = exc
                if body.cancelled_caught and program.returncode is not None:
                    failure = program.exit_error()
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        await program._stop()
                    except ProgramError as exc:
                        # The group is stuck: its record and the watchdog keep it ours, so
                        # the next start (or the node's death) tries again.
                        log.error("%s", exc)
                        failure = failure or exc
                    else:
                        watchdog.forget(program.pgid)
                        spec.record_path.unlink(missing_ok=True)
                        if failure is None and program.returncode is not None:
                            status = describe_status(program.returncode)
                            log.info("%s stopped: %s", spec.name, status)
                    finally:
                        await program._finish_output()
                        await program._process.aclose()
        if failure is not None:
            raise failure
    finally:
        _active.discard(spec.record_path)


async def _spawn(
    log: logging.Logger, spec: ProgramSpec, binary: Path, setpriv: Path
) -> RunningProgram:
    """Stop a leftover, check the addresses, start the program, record it."""
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    await stop_leftover(spec.name, spec.record_path, spec.stop_grace, log)
    check_binds(spec.name, spec.binds)
    env = {**os.environ, **spec.env} if spec.inherit_env else dict(spec.env)
    command = [str(setpriv), "--pdeathsig", "KILL", "--", str(binary), *spec.arguments]
    # Shielded: cancelled halfway, the spawn could leave a program nothing knows about.
    # From its return until the caller's finally owns the program, nothing awaits.
    with anyio.CancelScope(shield=True):
        process = await anyio.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.cwd,
            env=env,
            start_new_session=True,
        )
    try:
        stat = read_stat(process.pid)
        start_time = stat.start_time if stat is not None else 0
        watchdog.watch(process.pid, start_time)
        ProcessRecord(
            pid=process.pid,
            pgid=process.pid,
            start_time=start_time,
            boot_id=boot_id(),
            executable=str(binary),
            arguments=list(spec.arguments),
            node_pid=os.getpid(),
        ).write(spec.record_path)
    except BaseException:
        # Not recorded (a full disk, a read-only state directory): nothing would find it
        # again, so it must not run. Its group is still ours: the leader is not reaped.
        with anyio.CancelScope(shield=True):
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            await process.aclose()
        watchdog.forget(process.pid)
        raise
    log.info("started %s (%s): pid %d", spec.name, binary, process.pid)
    return RunningProgram(spec, binary, process, start_time, log)


def program_runnable(
    spec: ProgramSpec | Callable[[], ProgramSpec],
    ready: Callable[[RunningProgram, RunContext], Awaitable[None]] | None = None,
) -> Runnable:
    """A runnable that runs one program: starts it, waits for ``ready`` (if given), signals
    healthy, and fails with ``ProgramExitedError`` when the program exits.

    :param spec: the program; or a function returning it, called at each (re)start, for a
        spec that depends on state read at start (configuration, certificates written).
    :param ready: awaited with the running program before the runnable signals healthy;
        check readiness against ``program.pid``. The runnable's block is cancelled if the
        program exits meanwhile. None: healthy once the program itself holds every address
        of ``spec.binds`` (it listens: more than started); with no binds either, nothing
        can be checked, so healthy once started, and its note says it was not checked.

    For example, node_exporter::

        Worker("node_exporter", program_runnable(ProgramSpec(
            name="node_exporter", executable="prometheus-node-exporter",
            arguments=["--web.listen-address=127.0.0.1:7841"],
            binds=[Bind("127.0.0.1", 7841)], state_dir=node.data_dir,
        )))
    """

    async def run(ctx: RunContext) -> None:
        program_spec = spec() if callable(spec) else spec
        async with start_program(ctx.log, program_spec) as program:
            name, pid, binds = program_spec.name, program.pid, program_spec.binds
            running = f"{name} running, pid {pid}"
            if ready is not None:
                ctx.set_note(f"waiting for {name} (pid {pid})")
                await ready(program, ctx)
            elif binds:
                listed = ", ".join(str(bind) for bind in binds)
                ctx.set_note(f"waiting for {name} to listen on {listed} (pid {pid})")
                await _wait_listening(program, binds)
            else:
                running = f"{name} started, pid {pid} (nothing checks it is ready)"
            ctx.set_note(running)
            ctx.signal_healthy()
            await program.wait()

    return run


async def _wait_listening(program: RunningProgram, binds: Sequence[Bind]) -> None:
    """Return once ``program`` itself holds every address of ``binds``."""
    while not all(program.listens_on(bind) for bind in binds):  # noqa: ASYNC110 - /proc tells no one
        await anyio.sleep(LISTEN_POLL)
