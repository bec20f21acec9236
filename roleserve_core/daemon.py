"""The node process: ``roleserve node run``.

::

    lock the data directory ─▶ roleserve.toml ─▶ address (saved, flag, file, or detected)
    ─▶ plugins ─▶ NodeRuntime (checks each [plugins.NAME] section against its plugin's
    declared settings) ─▶ enrolment plan ─▶ runtime directory (its sockets: rundir)
    (errors here: exit 2, nothing started)
    ─▶ supervisor:  root.enrolment    join / bootstrap / register (enrolment)
                    root.connection   the curator connection (connection)
                    root.role.*       every plugin's workers, the core's among them
                    root.hooks.*      on_roles, on_curator_connection
    ─▶ until SIGTERM or SIGINT (exit 0), an enrolment refusal (exit 1), the cluster
       refusing the node for good (decommissioned: exit 1), or a final failure before the
       node is enrolled (exit 1)

A final failure (a runnable raised a ``FinalError``: restarting cannot fix it) reaches the
node through ``Supervisor.final_failures``. Before the node is enrolled (bootstrapping or
registering: it has no cluster yet, so nobody could see the failure in ``ctl tree`` and
nothing would ever come of waiting) it stops the node: exit 1, its line in the log and on
stderr. Once enrolled, the node keeps running its other roles and the failure stays
visible: the runnable's one ERROR line, and DEAD, final, in ``ctl tree`` until the operator
restarts it.

A node the cluster refuses for good (the leading curator answers its calls "node X is
decommissioned: ...", marked with ``rpc.NODE_REFUSED_METADATA``) stops the same way, with
that line: nothing it could do would be accepted again. It learns it from the first call
refused, at a restart moments after it finds the leader; its role workers stop with it.

The address is the node's identity as much as its key: the first start saves it in the data
directory once the enrolment plan is made, and every later start uses it. A later
``--address`` (or ``[node] address``) that differs is refused: the node's etcd peer URL and
its curator record name the saved one, and moving a node is not supported yet.

Meanwhile, ``memory.SETTLE`` seconds after the roles are first known and after each change
of them, the node gives the memory it freed back to the system (``memory``: glibc keeps
it otherwise, and a role's start frees megabytes).

Stopping cancels every runnable and waits for them: child processes (etcd) get SIGTERM
from their runnables, servers stop, files are closed, the node's runtime directory (its
sockets, ``rundir``) is removed, and only then does the process exit.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio

from roleserve_core.address import detect_address
from roleserve_core.clock import MonotonicClock
from roleserve_core.config import IPAddress, LogFiles, NodeConfig, load_config, parse_address
from roleserve_core.connection.connector import CuratorConnector
from roleserve_core.connection.curators import KnownCurators
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment import Enrolment, EnrolmentRequest, plan_enrolment
from roleserve_core.errors import ConfigError
from roleserve_core.event import Value
from roleserve_core.logtree import PROCESS_LOGGER, LogTree
from roleserve_core.memory import release_after_changes
from roleserve_core.plugin_loader import PluginSet, log_old_names
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.rundir import make_runtime_dir
from roleserve_core.runtime import CORE_READER, NodeRuntime
from roleserve_core.supervisor import RunnableStatus, State
from roleserve_core.values import BOOTSTRAPPED, NETWORK, ROLES, NetworkStatus

__all__ = [
    "NodeOptions",
    "checked_address",
    "config_address_source",
    "run_node",
    "serve_node",
]

log = logging.getLogger(f"{PROCESS_LOGGER}.node")


@dataclass(frozen=True)
class NodeOptions:
    """What ``roleserve node run`` was given; None means "as roleserve.toml says"."""

    datadir: NodeDataDirectory
    enrolment: EnrolmentRequest
    address: str | None = None
    log_level: str | None = None
    log_file: Path | None = None
    """``--log-file``: log there, rotated as roleserve.toml says (or by default)."""
    strict_plugins: bool | None = None


def run_node(options: NodeOptions) -> int:
    """Run the node until it is told to stop; the process's exit code."""
    return anyio.run(serve_node, options)


def configure_logging(level: str, log: LogFiles | None = None, stream: TextIO = sys.stderr) -> None:
    """Records of every runnable, one line each: into ``log``'s file, rotated by size, with
    the process's stdout and stderr (``_RotatingLog``), or on ``stream`` (under a service
    manager, the journal keeps and bounds them).

    :raises ConfigError: if the log file cannot be opened, naming it.
    """
    handler = _log_handler(log, stream)  # first: a file that cannot be opened changes nothing
    process = logging.getLogger(PROCESS_LOGGER)
    process.handlers.clear()
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
    )
    process.addHandler(handler)
    process.setLevel(level.upper())
    process.propagate = False


class _RotatingLog(logging.handlers.RotatingFileHandler):
    """A log file rotated by size, which the process's stdout and stderr follow.

    What the process writes outside logging (gRPC's C core, a traceback at exit, a line a
    program prints) then lands in the same file and is rotated with it, instead of growing
    a file of its own, or an older, renamed one, without bound.
    """

    def __init__(self, log: LogFiles) -> None:
        super().__init__(log.path, maxBytes=log.max_bytes, backupCount=log.files, encoding="utf-8")
        self._capture()

    def doRollover(self) -> None:  # noqa: N802 -- logging's name
        super().doRollover()
        self._capture()

    def _capture(self) -> None:
        if self.stream is None:
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            os.dup2(self.stream.fileno(), stream.fileno())


def _log_handler(log: LogFiles | None, stream: TextIO) -> logging.Handler:
    if log is None:
        return logging.StreamHandler(stream)
    try:
        return _RotatingLog(log)
    except OSError as exc:
        raise ConfigError(
            f"cannot open the log file {log.path}: {exc.strerror or exc}; fix its directory "
            "or set another ([node] log_file, --log-file)"
        ) from None


def log_files(options: NodeOptions, config: NodeConfig) -> LogFiles | None:
    """Where the node logs: ``--log-file``, else roleserve.toml's ``log_file`` (rotated as
    roleserve.toml says either way), else nowhere but stderr."""
    path = options.log_file or config.log_file
    if path is None:
        return None
    return LogFiles(path, config.log_max_bytes, config.log_files)


async def serve_node(options: NodeOptions) -> int:
    """The node process's body (see the module docstring).

    :raises NodeSetupError: before anything starts, for a problem the message explains.
    """
    datadir = options.datadir
    with datadir.locked():
        config = load_config(datadir.config)
        configure_logging(options.log_level or config.log_level, log_files(options, config))
        runtime, address = _assemble(options, config)
        stopped: Value[str] = Value()
        values = runtime.registry.scoped(CORE_READER)
        plan = plan_enrolment(
            datadir, options.enrolment, can_bootstrap=BOOTSTRAPPED in runtime.registry
        )
        _keep_address(datadir, address)
        # Its own curator, should node/curators.pb be corrupt (it answers on a consensus
        # member; on any other node, the connection is refused and nothing is lost).
        known = KnownCurators(datadir, fallback=[endpoint(str(address), CURATOR_PORT)])
        runtime.add_service("enrolment", Enrolment(plan, datadir, values, known, stopped.set))
        runtime.add_service("connection", CuratorConnector(known, values, stopped.set))
        values.set(NETWORK, NetworkStatus(address))
        log.info("node starting: data %s, address %s", datadir.root, address)
        # Replaced by what stops the node; stays if the supervision tree ends by itself.
        reason: str | None = "the supervision tree ended by itself"
        make_runtime_dir(runtime.runtime_dir)  # a refusal here is one line, nothing started
        try:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async with runtime.supervisor() as supervisor:
                    await supervisor.wait_state("root", State.HEALTHY)
                    log.info("node running: %d workers", len(runtime.workers))
                    reason = await _until_stopped(
                        signals,
                        stopped,
                        _stop_if_not_enrolled(datadir, supervisor.final_failures),
                        _release_memory(runtime),
                    )
        finally:
            # Every program the node ran has stopped: their sockets are of no use.
            runtime.remove_runtime_dir()
        if reason is not None:
            log.error("node stopped: %s", reason)
            print(f"roleserve node: error: {reason}", file=sys.stderr)
            return 1
        log.info("node stopped")
        return 0


def _assemble(options: NodeOptions, config: NodeConfig) -> tuple[NodeRuntime, IPAddress]:
    address = _node_address(options, config)
    strict = config.strict_plugins if options.strict_plugins is None else options.strict_plugins
    log_old_names(log)
    plugins = PluginSet.load(strict=strict)
    for warning in (*plugins.warnings, *plugins.deprecations):
        log.warning("%s", warning)
    runtime = NodeRuntime(
        plugins,
        data_dir=options.datadir.root,
        config=config.plugins,
        config_source=str(options.datadir.config),
        logtree=LogTree(),
    )
    return runtime, address


def _node_address(options: NodeOptions, config: NodeConfig) -> IPAddress:
    """The saved address; else the given one (flag, then roleserve.toml); else detected.

    :raises ConfigError: if the given address is not the saved one.
    """
    datadir = options.datadir
    given: IPAddress | None
    if options.address:
        given, source = parse_address(options.address, "--address"), "--address"
    else:
        given, source = config.address, config_address_source(datadir)
    return checked_address(datadir, given, source) or detect_address()


def config_address_source(datadir: NodeDataDirectory) -> str:
    """How a refusal names ``[node] address`` of the node's roleserve.toml."""
    return f"[node] address in {datadir.config}"


def checked_address(
    datadir: NodeDataDirectory, given: IPAddress | None, source: str
) -> IPAddress | None:
    """The saved address, else ``given`` (None if neither: to be detected). ``roleserve
    node config`` checks a file with it, as the node would.

    :raises ConfigError: if ``given`` (from ``source``) is not the saved address.
    """
    saved = datadir.read_address()
    if saved is None:
        return given
    if given is not None and given != saved:
        raise ConfigError(
            f"{datadir.root} is the node at {saved}, saved at its first start, and {source} "
            f"gives {given}; start it with {saved} or without {source} (changing a node's "
            "address is not supported yet)"
        )
    return saved


def _keep_address(datadir: NodeDataDirectory, address: IPAddress) -> None:
    """Save the address once the enrolment has a plan (earlier refusals write nothing)."""
    if datadir.read_address() is None:
        datadir.save_address(address)


def _release_memory(runtime: NodeRuntime) -> Callable[[Value[str]], Coroutine[Any, Any, None]]:
    """What returns the memory the node freed, once each change of its roles settled
    (``memory``): what a role's start frees would otherwise stay in the node's RSS."""

    async def watch(stopped: Value[str]) -> None:
        with runtime.registry.read(ROLES, CORE_READER).watch() as roles:
            await release_after_changes(roles, MonotonicClock())

    return watch


def _stop_if_not_enrolled(
    datadir: NodeDataDirectory, finals: Value[RunnableStatus]
) -> Callable[[Value[str]], Coroutine[Any, Any, None]]:
    """What stops the node on a final failure before it is enrolled (module docstring)."""

    async def watch(stopped: Value[str]) -> None:
        with finals.watch() as watcher:
            async for status in watcher:
                # The first reason wins: the enrolment stops the node itself on a refusal.
                if not datadir.enrolled and not stopped.statistics().is_set:
                    stopped.set(f"{status.dn}: {status.note}")

    return watch


async def _until_stopped(
    signals: AsyncIterator[int],
    stopped: Value[str],
    *watchers: Callable[[Value[str]], Coroutine[Any, Any, None]],
) -> str | None:
    """Wait for SIGTERM or SIGINT (None) or a reason to stop (the reason); ``watchers``
    run meanwhile and may set ``stopped``."""
    reason: str | None = None
    async with anyio.create_task_group() as tasks:

        async def on_signal() -> None:
            async for number in signals:
                log.info("%s: stopping", signal.Signals(number).name)
                tasks.cancel_scope.cancel()

        async def on_reason() -> None:
            nonlocal reason
            with stopped.watch() as watcher:
                reason = await watcher.get()
            tasks.cancel_scope.cancel()

        tasks.start_soon(on_signal)
        tasks.start_soon(on_reason)
        for watcher in watchers:
            tasks.start_soon(watcher, stopped)
    return reason
