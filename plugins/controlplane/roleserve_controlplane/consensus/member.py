"""One etcd member, run as a child process under the supervisor.

::

    EtcdMember(config) as a runnable
    ├── writes the member's TLS files, picks its mode from the data directory:
    │     data present ──▶ restart (etcd reads its membership from the data)
    │     no data, no peers ──▶ bootstrap a new one-member cluster
    │     no data, peers ──▶ join an existing cluster (as the learner added for it)
    ├── refuses (final) an etcd older than the one recorded with the data; records the
    │   binary it runs in etcd-binary.json when it creates the data, or upgrades it
    ├── starts etcd; its log lines (zap JSON) go to the log tree at the runnable's DN
    │   (etcd's info at DEBUG, its warn and worse as they are)
    ├── signals healthy once etcd answers a status request and knows a leader
    └── fails (DEAD, so the supervisor backs off) when etcd exits, with etcd's last error
        in the message; on cancellation: SIGTERM, then SIGKILL after ``stop_grace``

Clients and peers both use mutual TLS with the consensus CA.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import logging
import subprocess
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from roleserve_controlplane.consensus.binary import EtcdBinary, EtcdRecord, refuse_downgrade
from roleserve_controlplane.consensus.certificates import TLSFiles, write_tls_files
from roleserve_controlplane.consensus.client import EtcdClient
from roleserve_controlplane.consensus.errors import EtcdExitedError, EtcdRequestError
from roleserve_core import RunContext, Value
from roleserve_core.identity import Credentials

__all__ = [
    "DEFAULT_CLIENT_PORT",
    "DEFAULT_PEER_PORT",
    "RECORD_FILE",
    "EtcdMember",
    "MemberConfig",
    "MemberMode",
    "recorded_etcd",
]

DEFAULT_CLIENT_PORT = 7836
DEFAULT_PEER_PORT = 7837

RECORD_FILE = "etcd-binary.json"
"""In the member's directory: the etcd binary and version its data was created with."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def recorded_etcd(directory: Path) -> EtcdRecord | None:
    """The etcd that created the data of the member in ``directory`` (``find_etcd`` prefers
    it); None while there is no data: a record left without data protects nothing.

    :raises EtcdRecordError: if the record is unreadable.
    """
    if not (directory / "data" / "member").is_dir():
        return None
    return EtcdRecord.load(directory / RECORD_FILE)


class MemberMode(enum.Enum):
    """How a member starts."""

    BOOTSTRAP = "bootstrap a new one-member cluster"
    JOIN = "join an existing cluster"
    RESTART = "restart from its data directory"


@dataclass(frozen=True)
class MemberConfig:
    """Everything one etcd member needs."""

    name: str
    """The member's name: its node's ID."""
    directory: Path
    """The member's own directory: etcd's data in ``data/``, TLS files in ``tls/``."""
    address: IPAddress
    """The address it listens on and advertises."""
    credentials: Credentials
    """Its member certificate and key, and the consensus CA."""
    binary: EtcdBinary
    client_port: int = DEFAULT_CLIENT_PORT
    peer_port: int = DEFAULT_PEER_PORT
    peers: Mapping[str, str] = field(default_factory=dict)
    """To join: every member's name → peer URL, this one included. Empty to bootstrap."""
    heartbeat_ms: int = 100
    """etcd's heartbeat interval; tests use less."""
    election_ms: int = 1000
    """etcd's election timeout; tests use less."""
    stop_grace: float = 5.0
    """Seconds etcd may take to stop after SIGTERM before it gets SIGKILL."""

    @property
    def record_file(self) -> Path:
        """The record of the etcd that created the member's data (``RECORD_FILE``)."""
        return self.directory / RECORD_FILE

    @property
    def data_dir(self) -> Path:
        """etcd's data directory."""
        return self.directory / "data"

    def _url(self, port: int) -> str:
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"https://{host}:{port}"

    @property
    def client_url(self) -> str:
        """``https://address:client_port``."""
        return self._url(self.client_port)

    @property
    def peer_url(self) -> str:
        """``https://address:peer_port``."""
        return self._url(self.peer_port)

    @property
    def endpoint(self) -> str:
        """``address:client_port``, for an ``EtcdClient``."""
        return self.client_url.removeprefix("https://")

    def mode(self) -> MemberMode:
        """What starting this member will do, judged from its data directory."""
        if (self.data_dir / "member").is_dir():
            return MemberMode.RESTART
        return MemberMode.JOIN if self.peers else MemberMode.BOOTSTRAP

    def arguments(self, tls: TLSFiles) -> list[str]:
        """etcd's command line."""
        mode = self.mode()
        initial = self.peers if mode is MemberMode.JOIN else {self.name: self.peer_url}
        return [
            str(self.binary.path),
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={self.peer_url}",
            f"--initial-advertise-peer-urls={self.peer_url}",
            "--initial-cluster=" + ",".join(f"{n}={url}" for n, url in sorted(initial.items())),
            "--initial-cluster-state=" + ("existing" if mode is MemberMode.JOIN else "new"),
            f"--cert-file={tls.certificate}",
            f"--key-file={tls.key}",
            f"--trusted-ca-file={tls.ca}",
            "--client-cert-auth",
            f"--peer-cert-file={tls.certificate}",
            f"--peer-key-file={tls.key}",
            f"--peer-trusted-ca-file={tls.ca}",
            "--peer-client-cert-auth",
            f"--heartbeat-interval={self.heartbeat_ms}",
            f"--election-timeout={self.election_ms}",
            "--logger=zap",
            "--log-outputs=stderr",
        ]


_LEVELS = {
    "debug": logging.DEBUG,
    # etcd logs dozens of INFO lines per start and per election (raft state, each peer's
    # stream); at INFO they would bury the node's own story. Its WARN and worse stay.
    "info": logging.DEBUG,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "dpanic": logging.CRITICAL,
    "panic": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def parse_log_line(line: str) -> tuple[int, str]:
    """etcd's zap JSON line → (logging level, readable message).

    etcd's info becomes DEBUG (see ``_LEVELS``); a line that is not JSON (a panic's stack)
    stays visible at INFO, a ``panic:`` line at CRITICAL.
    """
    try:
        entry = json.loads(line)
    except ValueError:
        entry = None
    if not isinstance(entry, dict):
        level = logging.CRITICAL if line.startswith("panic:") else logging.INFO
        return level, line
    level = _LEVELS.get(str(entry.pop("level", "info")), logging.INFO)
    message = str(entry.pop("msg", ""))
    for noise in ("ts", "caller", "logger", "stacktrace"):
        entry.pop(noise, None)
    details = " ".join(f"{key}={value}" for key, value in entry.items())
    return level, f"{message} {details}".strip()


class EtcdMember:
    """A runnable that runs one etcd member (see the module docstring)."""

    def __init__(self, config: MemberConfig, *, health_poll: float = 0.05) -> None:
        self.config = config
        self.health_poll = health_poll
        self.process: anyio.abc.Process | None = None
        """The running etcd process, for tests and tools (None while not running)."""
        self.serving: Value[bool] = Value()
        """True once etcd serves (when the runnable signals healthy), False when it stops."""
        self.serving.set(False)

    async def __call__(self, ctx: RunContext) -> None:
        config = self.config
        mode = config.mode()
        recorded = recorded_etcd(config.directory)
        refuse_downgrade(config.binary, recorded)
        ctx.log.info("starting %s as member %s: %s", config.binary, config.name, mode.value)
        tls = write_tls_files(config.directory / "tls", config.credentials)
        config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._record_binary(ctx, recorded)
        # Shielded: cancelled halfway, the spawn could leave an etcd running that nothing
        # stops. Once it returns, the finally below owns the process.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                config.arguments(tls), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
            )
        self.process = process
        errors: deque[str] = deque(maxlen=3)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._signal_healthy_when_serving, ctx)
                assert process.stderr is not None
                await _pump_logs(process.stderr, ctx.log, errors)
                status = await process.wait()
                tasks.cancel_scope.cancel()
            last = "; ".join(errors) or "no error logged"
            raise EtcdExitedError(f"etcd exited with status {status}: {last}")
        finally:
            self.process = None
            self.serving.set(False)
            with anyio.CancelScope(shield=True):
                await _stop(process, config.stop_grace, ctx.log)

    def _record_binary(self, ctx: RunContext, recorded: EtcdRecord | None) -> None:
        """Record the binary about to run, when it creates the data or upgrades it.

        Written before etcd starts: a record without data is ignored (``recorded_etcd``),
        while data without a record would lose the protection. Data from before records
        existed gets the binary that runs it now.
        """
        record = EtcdRecord.of(self.config.binary)
        if record == recorded:
            return
        record.save(self.config.record_file)
        if recorded is not None:
            ctx.log.info(
                "recorded etcd %s at %s for this member's data (was etcd %s at %s)",
                record.version,
                record.path,
                recorded.version,
                recorded.path,
            )

    async def _signal_healthy_when_serving(self, ctx: RunContext) -> None:
        delay = self.health_poll
        async with EtcdClient(
            [self.config.endpoint], self.config.credentials, attempts=1
        ) as client:
            while True:
                try:
                    status = await client.status(timeout=1.0)
                except EtcdRequestError:
                    status = None
                if status is not None and status.leader != 0 and not status.errors:
                    ctx.log.info(
                        "serving: etcd %s, member %x%s",
                        status.version,
                        status.member_id,
                        " (learner)" if status.is_learner else "",
                    )
                    ctx.signal_healthy()
                    self.serving.set(True)
                    return
                await anyio.sleep(delay)
                delay = min(delay * 1.5, 0.5)


async def _pump_logs(
    stream: anyio.abc.ByteReceiveStream, log: logging.Logger, errors: deque[str]
) -> None:
    """Copy etcd's log lines into ``log`` until the stream ends; keep the last errors."""
    pending = ""
    async for chunk in TextReceiveStream(stream):
        pending += chunk
        *lines, pending = pending.split("\n")
        for line in lines:
            if line.strip():
                level, message = parse_log_line(line)
                log.log(level, "%s", message)
                if level >= logging.ERROR:
                    errors.append(message)


async def _stop(process: anyio.abc.Process, grace: float, log: logging.Logger) -> None:
    """SIGTERM, then SIGKILL if etcd has not exited within ``grace`` seconds."""
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(grace):
            await process.wait()
        if process.returncode is None:
            log.warning("etcd did not stop within %ss of SIGTERM; killing it", grace)
            process.kill()
            await process.wait()
    await process.aclose()
