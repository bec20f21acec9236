"""One node process of a local cluster: started, watched and stopped by its PID.

Each node runs in a session (process group) of its own, so that Ctrl-C in the terminal of
``cluster up`` reaches only ``cluster up``, which then stops the nodes in order, and so
that ``kill`` can end a node with everything it started (etcd), as a crash of its machine
would. The PID is kept in the node's directory, so ``cluster down`` from another shell
finds the nodes a detached ``cluster up`` left running.

A node that cannot go on without the operator (too little disk space, retried until it is
freed) says so in one ERROR line the supervisor writes, starting with
``supervisor.WAITING_FOR_OPERATOR``. ``LocalNode.refusal`` finds that line among what the node
logged since this process started it, so that ``cluster up`` stops waiting and shows it.
The log is the channel because it is the one both already have: the node keeps running (it
starts by itself once space is freed), so there is no exit status to read, and the node's
API needs the owner's credentials, which a node that cannot bootstrap never writes. (A final
failure needs no such line: a node not yet enrolled exits on it, with the line on stderr.)

``node.log`` is bounded: the node logs there with ``--log-file``, rotated by size (10 MiB,
5 older files, unless its roleserve.toml says otherwise), and its stdout and stderr follow
the file it writes, so a line printed outside logging is rotated with it. What the node
prints before it configures its logging is appended by this process's redirection.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.environment import REGISTER_TICKET_ENV
from roleserve_core.localcluster import nodelog
from roleserve_core.localcluster.netns import in_namespace
from roleserve_core.process import read_stat
from roleserve_core.supervisor import WAITING_FOR_OPERATOR

__all__ = ["BYTECODE_DIRECTORY", "LocalNode"]


def __getattr__(name: str) -> Any:
    """``LOOPBACK_WITHOUT``, deprecated: the plugins a loopback node ran without."""
    if name == "LOOPBACK_WITHOUT":
        warnings.warn(
            "roleserve_core.localcluster.process.LOOPBACK_WITHOUT is deprecated: a loopback "
            "node no longer runs without clusternet but with its mesh off, saying why; see "
            "roleserve_core.localcluster.nodeconfig.CLUSTERNET_OFF",
            DeprecationWarning,
            stacklevel=2,
        )
        return ("clusternet",)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


BYTECODE_DIRECTORY = "bytecode"
"""The cluster directory's folder where its nodes cache the bytecode of what they import,
where this process's environment says to write none (``PYTHONDONTWRITEBYTECODE``)."""


@dataclass
class LocalNode:
    """Node ``index`` (1-based) of a local cluster, in ``directory`` at ``address``, in
    the network namespace ``namespace`` if it has one (``cluster up --netns``)."""

    index: int
    address: ipaddress.IPv4Address
    directory: Path
    namespace: str | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    """The process, when this process started it (its exit status is collected here)."""
    _log_read: int | None = field(default=None, repr=False)
    """How far ``refusal`` has read the log; None unless this process started the node."""
    _log_start: int | None = field(default=None, repr=False)
    """Where the log stood when this process started the node: what it wrote since is
    this start's (``nodelog``); None unless this process started it."""
    started_at: float | None = field(default=None, repr=False)
    """When this process started the node (seconds since the epoch: a curator stamps the
    node's reports in the same clock); None unless it did."""

    @property
    def datadir(self) -> NodeDataDirectory:
        return NodeDataDirectory(self.directory)

    @property
    def log_file(self) -> Path:
        return self.directory / "node.log"

    @property
    def pid_file(self) -> Path:
        return self.directory / "node.pid"

    @property
    def started_here(self) -> bool:
        """Whether this process started the node (``cluster up`` stops only those)."""
        return self._process is not None

    @property
    def pid(self) -> int | None:
        """The PID of the node's process if it runs, else None."""
        if self._process is not None:
            return self._process.pid if self._process.poll() is None else None
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def start(self, *flags: str, env: Mapping[str, str] | None = None) -> int:
        """Start the node process (detached from this one); its PID.

        :param env: variables to add to this process's environment for the node: where
            secrets go (``ps`` shows every local user the arguments, not the environment).
            A register ticket in this process's own environment is not passed on: a node
            that is not registering would refuse it.
        """
        if self.pid is not None:
            raise RuntimeError(f"node {self.index} already runs (pid {self.pid})")
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "roleserve_core",
            "node",
            "run",
            "--data-dir",
            str(self.directory),
            "--address",
            str(self.address),
            "--log-file",
            str(self.log_file),
            *flags,
        ]
        if self.namespace is not None:
            command = in_namespace(self.namespace, command)
        with self.log_file.open("ab") as log:
            self._log_read = self._log_start = log.tell()
            self.started_at = time.time()
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env={**self._environment(), **(env or {})},
            )
        self._process = process
        self.pid_file.write_text(f"{process.pid}\n")
        return process.pid

    def _environment(self) -> dict[str, str]:
        """This process's environment for the node, without a register ticket."""
        inherited = {
            name: value for name, value in os.environ.items() if name != REGISTER_TICKET_ENV
        }
        if inherited.get("GRPC_VERBOSITY") == "NONE":
            # The silence of `roleserve cluster` at its terminal: a node's log keeps
            # gRPC's errors (roleserve_core.cli's _quiet_grpc).
            del inherited["GRPC_VERBOSITY"]
        if inherited.get("PYTHONDONTWRITEBYTECODE") and not inherited.get("PYTHONPYCACHEPREFIX"):
            # Where Python writes no bytecode (many container images; an installer that
            # compiled none), each node compiled every module it imported at every start:
            # at 100 nodes starting together, a second of CPU each. The nodes of a cluster
            # share one cache in its directory instead, and no source tree gets one.
            del inherited["PYTHONDONTWRITEBYTECODE"]
            inherited["PYTHONPYCACHEPREFIX"] = str(self.directory.parent / BYTECODE_DIRECTORY)
        return inherited

    async def stop(self, *, patience: float = 30.0) -> int | None:
        """SIGTERM, and wait for the node to stop cleanly; SIGKILL its group after
        ``patience`` seconds. Its exit status, when this process started it."""
        pid = self.pid
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        with anyio.move_on_after(patience):
            await _exit_of(pid)
            return self._process.wait() if self._process is not None else None
        self.kill()
        return self._process.wait() if self._process is not None else None

    def group_alive(self, pid: int) -> bool:
        """Whether any process of the node's group (led by ``pid``: the node and what it
        started, such as etcd) still runs."""
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """End the node and everything it started at once (SIGKILL to its process group),
        as a crash would."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            if self._process is not None:
                self._process.wait()

    def refusal(self) -> str | None:
        """``DN: message`` of the first line in which the node, since this process started
        it, said it waits for the operator (see the module docstring); None if it has not
        (or this process did not start it)."""
        if self._log_read is None:
            return None
        lines, self._log_read = nodelog.complete_lines_since(self.log_file, self._log_read)
        for line in lines:
            match = _REFUSAL.match(line)
            if match is not None:
                return f"{match['dn']}: {match['message']}"
        return None

    def log_tail(self, lines: int = 20) -> Sequence[str]:
        """The last lines of the node's log, to show when it fails: of this start only
        when this process started it (an earlier run's error would look like this one's)."""
        return self._this_start()[-lines:]

    def own_error(self) -> str | None:
        """The node's own error line (``nodelog.own_error``), from this start only when
        this process started it, else from the end of its log."""
        return nodelog.own_error(self.log_tail(200))

    def exit_status(self) -> int | None:
        """The exit status of the node, once it ended, when this process started it."""
        return self._process.poll() if self._process is not None else None

    def disk_full(self) -> int | None:
        """The bytes free where the node keeps its log and state, if too few to write
        (``nodelog.full_disk``); None otherwise."""
        return nodelog.full_disk(self.directory)

    def _this_start(self) -> list[str]:
        return nodelog.lines_since(self.log_file, self._log_start or 0)


_REFUSAL = re.compile(
    rf"^\S+ ERROR\s+(?P<dn>\S+): {re.escape(WAITING_FOR_OPERATOR)}"
    r"(?P<message>.*?)(?:; restarting in [0-9.]+s)?$"
)
"""A node's log line (``TIME LEVEL DN: message``, ``daemon.py``) that says it waits for the
operator; the coming restart's delay is left out of the message."""


def _alive(pid: int) -> bool:
    """Whether ``pid`` (not our child) runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and stat.state == "Z"


async def _exit_of(pid: int) -> None:
    """Wait until ``pid`` exits (a pidfd turns readable then; child or not)."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await anyio.wait_readable(descriptor)
    finally:
        os.close(descriptor)
