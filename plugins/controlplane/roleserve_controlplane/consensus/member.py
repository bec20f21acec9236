"""One etcd member, run as a child process under the supervisor.

::

    EtcdMember(config) as a runnable
    ├── writes the member's TLS files, picks its mode from its membership record
    │   (``record.plan_start``; written once etcd served as this member, never inferred
    │   from data alone):
    │     record ──▶ restart, unless a peer says the cluster does not know it (final)
    │     no record, no peers ──▶ bootstrap a new one-member cluster
    │     no record, peers ──▶ join an existing cluster (as the learner added for it)
    │     data without a record (an interrupted bootstrap or join) ──▶ moved aside, again
    │   and saves the peers it planned with (``peers.json``): with the TLS files and the
    │   record, what a start needs while the node's roles are unknown (``saved``)
    ├── refuses (final) an etcd older than the one recorded with the data; records the
    │   binary it runs in etcd-binary.json when it creates the data, or upgrades it
    ├── starts etcd through the core's runner (``roleserve_core.process``), recorded in the
    │   member's directory: a leftover of a killed node is stopped first, an address held
    │   by anyone else is a PortInUseError, and etcd dies with the node; its log lines
    │   (zap JSON) go to the log tree at the runnable's DN (info, and the warnings of
    │   normal operation listed in ``etcdlog``, at DEBUG; other warnings and worse as they
    │   are)
    ├── refuses (DiskSpaceError, retried after the backoff) to start etcd without the free
    │   space it needs in the member's directory (``space``: its write-ahead log is
    │   allocated in full), naming the directory, the free and the needed bytes
    ├── signals healthy once the etcd it started answers a status request as the member
    │   named ``config.name`` and knows a leader, never whatever answers on the address;
    │   then writes the membership record (``membership.json``) if there is none; until
    │   then, every ``MEMBERSHIP_RECHECK`` seconds, asks the cluster whether it still lists
    │   a recorded member (``record.check_membership``): a rebuild that landed meanwhile is
    │   RebuildWaitingError (started again, which rebuilds it), a removal NotAMemberError
    ├── then probes it (``liveness``): no answer ──▶ the note says since when; after
    │   ``config.liveness.failures`` probes in a row, EtcdNotAnsweringError (restarted)
    └── fails (DEAD, so the supervisor backs off) when etcd exits: EtcdExitedError, with
        etcd's last error lines, or DiskSpaceError when they say "no space left on device",
        or CorruptDataError when they say its data cannot be read (``corruption``: one line
        naming ``ctl consensus rebuild NODE``; the rebuild is found at the next start, see
        ``record``); on cancellation: SIGTERM to its group, then SIGKILL after ``stop_grace``,
        but first, for up to ``USER_GRACE`` s, it waits for the runnables it serves
        (``serving_for``: the node's curator) to end: a node stopping cleanly cancels both
        at once, and a leading curator's last request, the revoke of its election lease
        that lets the next curator lead at once, needs its member still serving

Clients and peers both use mutual TLS with the consensus CA.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio

from roleserve_controlplane.consensus.binary import (
    INSTALL_HINT,
    EtcdBinary,
    EtcdRecord,
    etcd_minor,
    refuse_downgrade,
)
from roleserve_controlplane.consensus.certificates import TLSFiles, write_tls_files
from roleserve_controlplane.consensus.client import EtcdClient, Member, MemberStatus
from roleserve_controlplane.consensus.corruption import corrupt_data
from roleserve_controlplane.consensus.defaults import (
    DEFAULT_ELECTION_MS,
    DEFAULT_GC_PERCENT,
    DEFAULT_HEARTBEAT_MS,
)
from roleserve_controlplane.consensus.errors import (
    CorruptDataError,
    DiskSpaceError,
    EtcdExitedError,
    EtcdRequestError,
)
from roleserve_controlplane.consensus.etcdlog import parse_etcd_log
from roleserve_controlplane.consensus.faults import fault_point
from roleserve_controlplane.consensus.liveness import Liveness, probe_forever
from roleserve_controlplane.consensus.maintenance import DEFAULT_QUOTA_BACKEND_BYTES
from roleserve_controlplane.consensus.record import (
    MEMBERSHIP_FILE,
    MemberMode,
    MembershipRecord,
    Start,
    check_membership,
    plan_start,
)
from roleserve_controlplane.consensus.saved import save_peers
from roleserve_controlplane.consensus.space import disk_full, require_space
from roleserve_core import (
    BackoffPolicy,
    Bind,
    ProgramExitedError,
    ProgramSpec,
    Retry,
    RunContext,
    Runnable,
    RunningProgram,
    Value,
    endpoint,
    local_exporter_host,
    start_program,
    stop_leftover,
)
from roleserve_core.identity import Credentials

__all__ = [
    "DEFAULT_CLIENT_PORT",
    "DEFAULT_GC_PERCENT",
    "DEFAULT_PEER_PORT",
    "MEMBERSHIP_FILE",
    "RECORD_FILE",
    "EtcdMember",
    "MemberConfig",
    "MemberMode",
    "is_member",
    "recorded_etcd",
]

DEFAULT_CLIENT_PORT = 7836
DEFAULT_PEER_PORT = 7837
MEMBERSHIP_RECHECK = 5.0
"""Seconds between the member's questions to the cluster, while its etcd does not serve yet,
whether it still lists the member (``record.check_membership``): a few election timeouts,
so that a member waiting for its cluster's quorum asks its peers rarely."""

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
    metrics_port: int | None = None
    """Where etcd serves its Prometheus metrics over plain HTTP, on the node's local
    exporter host (``local_exporter_host``; the metrics plugin proxies it as ``etcd``);
    None: nowhere but on the client URL, behind client certificates."""
    peers: Mapping[str, str] = field(default_factory=dict)
    """To join: every member's name → peer URL, this one included. Empty to bootstrap."""
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    """etcd's heartbeat interval; tests use less."""
    election_ms: int = DEFAULT_ELECTION_MS
    """etcd's election timeout; tests use less."""
    quota_backend_bytes: int = DEFAULT_QUOTA_BACKEND_BYTES
    """etcd's ``--quota-backend-bytes``: past it, the member raises the NOSPACE alarm and
    the cluster refuses writes until maintenance clears it (see ``maintenance``)."""
    gc_percent: int = DEFAULT_GC_PERCENT
    """etcd's ``GOGC``: how far its Go heap may grow past the live heap before a collection
    (``DEFAULT_GC_PERCENT``)."""
    stop_grace: float = 5.0
    """Seconds etcd may take to stop after SIGTERM before it gets SIGKILL."""
    liveness: Liveness = field(default_factory=Liveness)
    """How the running etcd is probed, and after how many silent probes it is restarted."""

    @property
    def record_file(self) -> Path:
        """The record of the etcd that created the member's data (``RECORD_FILE``)."""
        return self.directory / RECORD_FILE

    @property
    def membership_file(self) -> Path:
        """The record that the member's bootstrap or join committed (``MEMBERSHIP_FILE``)."""
        return self.directory / MEMBERSHIP_FILE

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
    def metrics_url(self) -> str | None:
        """``http://<local exporter host>:metrics_port``, or None without a metrics port."""
        if self.metrics_port is None:
            return None
        return f"http://{endpoint(local_exporter_host(self.address), self.metrics_port)}"

    @property
    def endpoint(self) -> str:
        """``address:client_port``, for an ``EtcdClient``."""
        return self.client_url.removeprefix("https://")

    def mode(self) -> MemberMode:
        """What starting this member will do, judged from its membership record alone
        (``plan_start`` first deals with data an interrupted start left without one)."""
        if self.membership_file.exists():
            return MemberMode.RESTART
        return MemberMode.JOIN if self.peers else MemberMode.BOOTSTRAP

    def arguments(self, tls: TLSFiles, mode: MemberMode | None = None) -> list[str]:
        """etcd's arguments (after the binary: the runner puts ``binary.path`` first).

        Only ``BOOTSTRAP`` says ``new``: a restart says ``existing``, which etcd ignores
        while it has its WAL, and which cannot found a cluster if the WAL is gone.
        """
        mode = mode or self.mode()
        initial = self.peers or {self.name: self.peer_url}
        metrics = [f"--listen-metrics-urls={self.metrics_url}"] if self.metrics_url else []
        return [
            *metrics,
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={self.peer_url}",
            f"--initial-advertise-peer-urls={self.peer_url}",
            "--initial-cluster=" + ",".join(f"{n}={url}" for n, url in sorted(initial.items())),
            "--initial-cluster-state=" + ("new" if mode is MemberMode.BOOTSTRAP else "existing"),
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
            f"--quota-backend-bytes={self.quota_backend_bytes}",
            f"--snapshot-count={SNAPSHOT_COUNT}",
            f"{progress_notify_flag(self.binary.version)}={PROGRESS_NOTIFY_INTERVAL}",
            "--logger=zap",
            "--log-outputs=stderr",
        ]


SNAPSHOT_COUNT = 10_000
"""Applied entries between etcd's snapshots (``--snapshot-count``; etcd 3.4 and 3.5 default
to 100,000, 3.6 to 10,000). etcd keeps the raft log since its last snapshot in memory,
plus 5,000 entries for followers to catch up from, so this bounds a member's memory under
churn: with 100,000, a few KiB per role change grew a member by hundreds of MiB before its
first snapshot (``benchmarks/etcd.py`` (e3), docs/consensus.md)."""


PROGRESS_NOTIFY_INTERVAL = "10s"
"""How often etcd tells a watch that asked for it (the Kubernetes apiserver's watch cache,
one per resource) the current revision when nothing changed (etcd's default: 10 minutes).
The apiserver's cache of an idle resource knows no newer revision than that, and its
consistency check (every 5 to 7.5 minutes) lists etcd at it: past the 5 minutes of history
the curator and the apiservers keep, about half the resources of an idle apiserver failed
each round, an ERROR line each ("failed calculating etcd digest: The resourceVersion for
the provided list is too old"). 10 s and not a minute: ``benchmarks/soak.py`` keeps 20 to
60 s of history; a retention under 10 s brings the errors back. The cost: one small message
per watch per interval, about 6 a second to a controller's apiserver."""


def progress_notify_flag(version: str) -> str:
    """etcd's flag for ``PROGRESS_NOTIFY_INTERVAL``: experimental until etcd 3.6, which
    renamed it (the old name is deprecated there, gone in 3.7)."""
    minor = etcd_minor(version)
    if minor is not None and minor >= (3, 6):
        return "--watch-progress-notify-interval"
    return "--experimental-watch-progress-notify-interval"


USER_GRACE = 3.0
"""Seconds a member asked to stop keeps etcd serving for the runnables it serves
(``EtcdMember.serving_for``) to end: a leading curator gives its lease's revoke 2 s."""


class EtcdMember:
    """A runnable that runs one etcd member (see the module docstring)."""

    def __init__(self, config: MemberConfig, *, health_poll: float = 0.05) -> None:
        self.config = config
        self.health_poll = health_poll
        self.program: RunningProgram | None = None
        """The running etcd (pid, ``exited``), for tests and tools; None while not running."""
        self.serving: Value[bool] = Value()
        """True once etcd serves (when the runnable signals healthy), False when it stops."""
        self.serving.set(False)
        self._users: Value[int] = Value()
        self._users.set(0)

    def serving_for(self, runnable: Runnable) -> Runnable:
        """``runnable`` (the node's curator), run so that this member, asked to stop at the
        same time (the node stopping), keeps etcd serving until ``runnable`` has ended, for
        up to ``USER_GRACE`` s: the leader's revoke of its lease on the way out needs it."""

        async def served(ctx: RunContext) -> None:
            with self._used():
                await runnable(ctx)

        return served

    @contextlib.contextmanager
    def _used(self) -> Iterator[None]:
        self._users.set(self._users.get_nowait() + 1)
        try:
            yield
        finally:
            self._users.set(self._users.get_nowait() - 1)

    async def _until_unused(self) -> None:
        """Wait (shielded, at most ``USER_GRACE`` s) until no runnable it serves runs."""
        with anyio.move_on_after(USER_GRACE, shield=True), self._users.watch() as users:
            await users.get(filter=lambda count: count == 0)

    async def __call__(self, ctx: RunContext) -> None:
        config = self.config
        recorded = recorded_etcd(config.directory)
        refuse_downgrade(config.binary, recorded)
        require_space(config.directory)
        tls = write_tls_files(config.directory / "tls", config.credentials)
        # A leftover etcd of a killed run must be gone before the data is judged (and
        # perhaps moved aside); start_program would stop it only later.
        await stop_leftover("etcd", self.program_spec(tls).record_path, config.stop_grace, ctx.log)
        start = await plan_start(config, ctx.log)
        save_peers(config.directory, start.peers)
        step = "bootstrap" if start.mode is MemberMode.BOOTSTRAP else "join"
        ctx.log.info("starting %s as member %s: %s", config.binary, config.name, start.mode.value)
        config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._record_binary(ctx, recorded)
        try:
            async with (
                start_program(ctx.log, self.program_spec(tls, start)) as etcd,
                EtcdClient([config.endpoint], config.credentials, attempts=1) as client,
            ):
                self.program = etcd
                try:
                    crash = functools.partial(etcd.send_signal, signal.SIGKILL)
                    fault_point(f"{step}:started", crash)
                    status = await self._wait_serving(ctx, etcd, client)
                    fault_point(f"{step}:serving", crash)
                    self._record_membership(ctx, status, start.mode)
                    fault_point(f"{step}:recorded", crash)
                    ctx.signal_healthy()
                    self.serving.set(True)
                    await probe_forever(ctx, client, config.liveness, etcd.pid)
                except anyio.get_cancelled_exc_class():
                    await self._until_unused()
                    raise
                finally:
                    self.program = None
                    self.serving.set(False)
        except ProgramExitedError as exc:
            raise self._exit_error(exc) from None

    def _exit_error(
        self, exc: ProgramExitedError
    ) -> DiskSpaceError | CorruptDataError | EtcdExitedError:
        """What etcd's exit stands for: a full disk when its last lines say so (one line,
        retried until space is freed), corrupt data when they say that (one line, retried
        until the operator has it rebuilt), else the exit with its last error lines."""
        config = self.config
        full = disk_full(exc.lines, config.directory)
        corrupt = corrupt_data(exc.lines, config.data_dir, config.name)
        return full or corrupt or EtcdExitedError(exc.name, exc.returncode, exc.lines)

    def program_spec(self, tls: TLSFiles, start: Start | None = None) -> ProgramSpec:
        """etcd as the runner starts it: the binary ``find_etcd`` chose, its record in the
        member's directory (where a node started again finds its killed run's etcd), and
        both of its addresses checked before it starts; as ``start`` planned (by default,
        as the membership record says)."""
        config = self.config if start is None else replace(self.config, peers=start.peers)
        mode = None if start is None else start.mode
        return ProgramSpec(
            name="etcd",
            executable=str(config.binary.path),
            setting=INSTALL_HINT,
            arguments=config.arguments(tls, mode),
            state_dir=config.directory,
            binds=[self.client_bind, self.peer_bind],
            parser=parse_etcd_log,
            stop_grace=config.stop_grace,
            env={"GOGC": str(config.gc_percent)},
        )

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

    def _record_membership(self, ctx: RunContext, status: MemberStatus, mode: MemberMode) -> None:
        """Record that this member's bootstrap or join committed: etcd served as it. Only
        this record makes the next start a restart (see ``record.plan_start``)."""
        if self.config.membership_file.exists():
            return
        how = {MemberMode.BOOTSTRAP: "bootstrap", MemberMode.JOIN: "join"}.get(mode, "adopted")
        record = MembershipRecord(self.config.name, status.cluster_id, status.member_id, how)
        record.save(self.config.membership_file)
        ctx.log.info(
            "recorded membership: member %x of cluster %x (%s)",
            status.member_id,
            status.cluster_id,
            how,
        )

    async def _wait_serving(
        self, ctx: RunContext, etcd: RunningProgram, client: EtcdClient
    ) -> MemberStatus:
        """Return (its status) once ``etcd``, the child started, serves as this member.

        Whatever answers on the address is not enough: an orphan of a killed node once
        answered there while this node's own etcd crash-looped. So the answer must come from
        ``etcd``'s own listener, as the member named ``config.name``, while ``etcd`` runs.
        (The runner has already stopped a recorded leftover, and refused an address held by
        anyone else.)
        """
        polls = Retry(
            BackoffPolicy(initial=self.health_poll, multiplier=1.5, maximum=0.5, jitter=0.0)
        )
        recheck = anyio.current_time() + MEMBERSHIP_RECHECK
        while True:
            if anyio.current_time() >= recheck:
                await check_membership(self.config)
                recheck = anyio.current_time() + MEMBERSHIP_RECHECK
            status = await self._own_status(client, etcd)
            if status is not None and not etcd.exited.is_set():
                ctx.log.info(
                    "serving: etcd %s, member %x%s, pid %d",
                    status.version,
                    status.member_id,
                    " (learner)" if status.is_learner else "",
                    etcd.pid,
                )
                return status
            await polls.wait()

    async def _own_status(self, client: EtcdClient, etcd: RunningProgram) -> MemberStatus | None:
        """The status of the etcd answering, if it is ``etcd`` serving as this member and
        knows a leader.

        ``etcd`` must hold the client address's listener, and the member list must give the
        answering member ID the name ``config.name``. A learner is asked for no list (etcd
        refuses a learner that request): the listener of the child started identifies it.
        """
        try:
            status = await client.status(timeout=1.0)
            if status.leader == 0 or status.errors or not etcd.listens_on(self.client_bind):
                return None
            if status.is_learner:
                return status
            members = await client.members(timeout=1.0)
        except EtcdRequestError:
            return None
        return status if is_member(self.config.name, status, members) else None

    @property
    def client_bind(self) -> Bind:
        """The address etcd serves clients on."""
        return Bind(str(self.config.address), self.config.client_port)

    @property
    def peer_bind(self) -> Bind:
        """The address etcd serves its peers on."""
        return Bind(str(self.config.address), self.config.peer_port)


def is_member(name: str, status: MemberStatus, members: Sequence[Member]) -> bool:
    """Whether ``status`` came from the member called ``name`` in etcd's member list.

    A member just joined lists no name until it has published it; it is not taken for
    this one until it has.
    """
    return any(m.id == status.member_id and m.name == name for m in members)
