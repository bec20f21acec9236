"""The curator: a runnable next to each etcd member; one of them leads.

::

    serve CuratorLocal ─── wait until the local etcd member votes (a learner cannot serve
        the election); without a quorum, say so (note, log, GetCurrentLeader: ``quorum``)
    loop:
      serve CuratorLocal (follower) ─── campaign in the election (value: ID, host, port)
           ─── meanwhile, every 2 s: a lost quorum said in the note and log
      won: start the leader's state (the follower's server still answers "just elected;
           retry"): the garbage collector tuned for leading (collector.py), node cache
           (one etcd watch), heartbeats, learner promotion, prefixes for approved nodes
           lacking one, etcd's raft leadership handed to another member (raftleader.py:
           now, after each promotion, every 30 s) ─── stop the follower server, serve
           Curator, Management and CuratorLocal (and plugins' services: extension.py), refusing
           decommissioned nodes (standing.py) and revoked user certificates
           (credentials.py: one etcd watch); etcd's maintenance (compaction,
           defragmentation, quota alarms) every period
      lost (lease unconfirmed): stop the leader's server at once (clients see their streams
           end and look for the new leader), drop the leader's state, follow again

Each change of role restarts the gRPC server on the same port without grace, so no stream
outlives the role it was opened under.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace

import anyio
import grpc

from roleserve_controlplane.consensus import (
    DEFAULT_TTL,
    ETCD_RETRY,
    Election,
    EtcdClient,
    EtcdMaintenance,
    EtcdRequestError,
    Leadership,
    LeadershipLostError,
    MaintenancePolicy,
    Member,
)
from roleserve_controlplane.curator.authority import ClusterAuthority
from roleserve_controlplane.curator.cache import NodeCache
from roleserve_controlplane.curator.collector import leading_collector
from roleserve_controlplane.curator.credentials import RevokedSerials
from roleserve_controlplane.curator.extension import CuratorExtension, CuratorLeader
from roleserve_controlplane.curator.health import DEFAULT_HEARTBEAT_INTERVAL, Heartbeats
from roleserve_controlplane.curator.leader import CURATOR_PORT, LeaderState
from roleserve_controlplane.curator.prefixes import ClusterNetwork, PrefixesExhaustedError
from roleserve_controlplane.curator.quorum import QuorumReport, probe_quorum
from roleserve_controlplane.curator.raftleader import RaftLeaderKeeper
from roleserve_controlplane.curator.service_curator import CuratorService
from roleserve_controlplane.curator.service_curator import add_to_server as add_curator_service
from roleserve_controlplane.curator.service_local import CuratorLocalService
from roleserve_controlplane.curator.service_management import ManagementService
from roleserve_controlplane.curator.service_not_leading import NotLeadingHandler
from roleserve_controlplane.curator.standing import DecommissionedGate
from roleserve_controlplane.curator.state import (
    APPROVED_STATES,
    LEADER_PREFIX,
    ClusterState,
    NodeNotFoundError,
    history_retention,
)
from roleserve_controlplane.proto import state_pb2
from roleserve_core import (
    Clock,
    MonotonicClock,
    Retry,
    RoleserveError,
    RunContext,
    Value,
    common_pb2,
    curator_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
    retry,
)
from roleserve_core.identity import Credentials, NodeCredentials
from roleserve_core.rpc import (
    ENCRYPTION_OFFLOAD_OPTIONS,
    NodeGate,
    Revocations,
    bind,
    create_server,
)
from roleserve_core.stats import LeaderSnapshot, NodeStats

__all__ = ["Curator", "CuratorConfig", "CuratorRole", "allocate_missing_prefixes"]

log = logging.getLogger("roleserve.curator")

CuratorRole = str
"""``waiting``, ``following`` or ``leading``."""

QUORUM_EVERY = 2.0
"""Seconds between looks at the quorum while following (``_watch_quorum``)."""
FAILED_TERM_PAUSE = 1.0
"""Seconds a curator whose term's etcd requests failed waits before it looks again."""


@dataclass(frozen=True)
class CuratorConfig:
    """Everything one curator needs."""

    node: NodeCredentials
    """The node's credentials: the identity its gRPC server presents."""
    etcd: Credentials
    """Credentials for etcd (the member's, which may act as a client too)."""
    etcd_endpoints: Sequence[str]
    """The local member's client endpoint first; the curator talks to etcd through them."""
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int = CURATOR_PORT
    lease_ttl: int = DEFAULT_TTL
    promote_every: float = 2.0
    """Seconds between looks for learners that have caught up."""
    clock: Clock = field(default_factory=MonotonicClock)
    """The clock heartbeats are measured with, and etcd's maintenance runs on."""
    maintenance: MaintenancePolicy = field(default_factory=MaintenancePolicy)
    """Defragmentation thresholds and the members' quota, from this node's settings; the
    retention is the cluster configuration's (``history_retention``)."""
    current_node: Callable[[], NodeCredentials] | None = None
    """The node's latest credentials (renewed ones), asked at each TLS handshake of its
    server; None: ``node`` for good."""
    stats: NodeStats | None = None
    """The node's counters, for metrics: its server counts the calls it handles there, and
    while it leads it offers a snapshot of the cluster (``leader_snapshot``); None: neither."""
    extensions: Sequence[CuratorExtension] = ()
    """Other plugins' services, served while leading (``roleserve_curator_services``)."""


class Curator:
    """A runnable: the curator of one node (see the module docstring)."""

    def __init__(self, config: CuratorConfig) -> None:
        self.config = config
        self.role: Value[CuratorRole] = Value()
        """What this curator does now, for tests and status."""
        self.role.set("waiting")

    @property
    def leader_value(self) -> state_pb2.LeaderValue:
        """What this curator campaigns with."""
        return state_pb2.LeaderValue(
            node_id=self.config.node.node_id, host=str(self.config.address), port=self.config.port
        )

    async def __call__(self, ctx: RunContext) -> None:
        config = self.config
        self.role.set("waiting")  # a restart begins where the first start did
        observe = config.stats.etcd.observe if config.stats is not None else None
        async with EtcdClient(config.etcd_endpoints, config.etcd, observe=observe) as client:
            election = Election(client, LEADER_PREFIX, ttl=config.lease_ttl)
            # Served while waiting too, so that clients hear "no quorum" from a curator
            # whose members are down, rather than a refused connection.
            async with self._serving(*self._follower_services(client, election)):
                ctx.set_note("waiting for the local etcd member to vote")
                await self._wait_until_voting(ctx, client)
            while True:
                try:
                    cause = await self._one_term(ctx, client, election)
                except* EtcdRequestError as failed:  # from the term's task groups
                    await self._wait_after_failed_term(ctx, client, election, failed)
                else:
                    ctx.log.warning("lost leadership: %s; following", cause)

    async def _wait_after_failed_term(
        self,
        ctx: RunContext,
        client: EtcdClient,
        election: Election,
        failed: BaseExceptionGroup[EtcdRequestError],
    ) -> None:
        """A term's etcd requests failed (a lease grant without a quorum, most often): wait,
        still serving, until the local member votes again, instead of failing the runnable,
        whose restart would refuse connections for its backoff, when clients most need to
        hear why there is no leader."""
        error: BaseException = failed
        while isinstance(error, BaseExceptionGroup):  # the first of the (nested) group
            error = error.exceptions[0]
        ctx.log.warning("etcd did not answer (%s); waiting for its members", error)
        # The role stays "following" (it serves as a follower does); the note says why.
        async with self._serving(*self._follower_services(client, election)):
            await anyio.sleep(FAILED_TERM_PAUSE)
            await self._wait_until_voting(ctx, client)

    def _follower_services(
        self, client: EtcdClient, election: Election
    ) -> tuple[CuratorLocalService, NotLeadingHandler]:
        """What a curator that does not lead serves: who leads (or why none does)."""
        node_id = self.config.node.node_id
        quorum = functools.partial(probe_quorum, client, self.config.etcd)
        local = CuratorLocalService(node_id, ClusterState(client), election, None, quorum)
        extended = [
            service for extension in self.config.extensions for service in extension.services
        ]
        return local, NotLeadingHandler(node_id, extended, election)

    async def _wait_until_voting(self, ctx: RunContext, client: EtcdClient) -> None:
        """Wait until the local member is a voter with a leader; meanwhile, a consensus
        without a quorum is said in the note (``waiting: no quorum (1 of 3 members
        answer)``) and in one log line each time who answers changes."""
        pauses = Retry(ETCD_RETRY)
        notice = QuorumNotice(ctx, "waiting", "waiting for the local etcd member to vote")
        while True:
            try:
                status = await client.status(timeout=2.0)
            except EtcdRequestError:
                status = None
            if status is not None and not status.is_learner and status.leader:
                notice.show(None)
                return
            notice.show(await probe_quorum(client, self.config.etcd))
            await pauses.wait()

    async def _watch_quorum(self, ctx: RunContext, client: EtcdClient, done: anyio.Event) -> None:
        """While following (until ``done``): say a lost quorum in the note and log as
        ``_wait_until_voting`` does. A follower's campaign may wait on without failing
        when the quorum goes, and its note would say "following" all along."""
        notice = QuorumNotice(ctx, "following", "following")
        while not done.is_set():
            report = await probe_quorum(client, self.config.etcd)
            if done.is_set():  # elected meanwhile: the note is the leader's now
                return
            notice.show(report)
            with anyio.move_on_after(QUORUM_EVERY):
                await done.wait()

    async def _one_term(self, ctx: RunContext, client: EtcdClient, election: Election) -> str:
        """Follow until elected, then lead until leadership is lost; why it was lost."""
        node_id = self.config.node.node_id
        async with AsyncExitStack() as stack:
            # The follower's server stops once elected, or with the term: one stop either
            # way. grpc's stop is not re-entrant: a stop cancelled halfway (the term ending
            # then) and a second one raise InvalidStateError from grpc's loop.
            following = AsyncExitStack()
            stack.push_async_callback(following.aclose)
            await following.enter_async_context(
                self._serving(*self._follower_services(client, election))
            )
            self._announce(ctx, "following")
            followed = anyio.Event()
            watching = await stack.enter_async_context(anyio.create_task_group())
            watching.start_soon(self._watch_quorum, ctx, client, followed)
            leadership = await stack.enter_async_context(
                election.campaign(self.leader_value.SerializeToString())
            )
            followed.set()
            # The follower's server serves on while the leader's state loads (its cache grows
            # with the nodes), answering "just elected; retry", marked: nodes that found this
            # curator keep a working connection, and reconnect the moment the leader's server
            # replaces it, instead of being refused and backing off (gRPC's reconnect backoff
            # grows while nothing listens, to seconds behind the leader's start).
            leader = await self._leader_state(client, leadership)
            # On real time, whatever the clock of heartbeats and maintenance (a test advancing
            # its fake clock waits for their sleepers, and should not find the freezer).
            await stack.enter_async_context(leading_collector(MonotonicClock()))
            # The local member first (CuratorConfig.etcd_endpoints): a crash of this node
            # should not stop etcd's raft leader too (raftleader.py).
            raft_leader = RaftLeaderKeeper(self.config.etcd_endpoints[0], self.config.etcd)
            tasks = await stack.enter_async_context(anyio.create_task_group())
            tasks.start_soon(leader.cache.run)
            tasks.start_soon(self._promote_learners, leader, raft_leader.voters_changed)
            tasks.start_soon(allocate_missing_prefixes, leader.state, leader.network)
            tasks.start_soon(leader.revoked.run)
            tasks.start_soon(leader.maintenance.run)
            tasks.start_soon(raft_leader.run)
            await leader.revoked.ready.wait()  # serving before would let a revoked user in
            curator_service = CuratorService(leader)
            self._offer_snapshots(stack, leader, curator_service)
            await following.aclose()
            await stack.enter_async_context(
                self._serving(
                    CuratorLocalService(node_id, leader.state, election, self.leader_value),
                    curator_service,
                    ManagementService(leader),
                    gate=DecommissionedGate(leader.cache),
                    revocations=leader.revoked,
                    extensions=self.config.extensions,
                    leader=CuratorLeader.of(leader),
                )
            )
            self._announce(ctx, "leading")
            await leadership.lost.wait()
            tasks.cancel_scope.cancel()
        return leadership.cause

    def _offer_snapshots(
        self, stack: AsyncExitStack, leader: LeaderState, service: CuratorService
    ) -> None:
        """Offer ``leader_snapshot`` to the node's metrics until leadership ends."""
        stats = self.config.stats
        if stats is None:
            return
        stats.leader = lambda: leader_snapshot(leader, service.open_watches)

        def withdraw() -> None:
            stats.leader = None

        stack.callback(withdraw)

    def _announce(self, ctx: RunContext, role: CuratorRole) -> None:
        if self.role.get_nowait() == "waiting":
            ctx.signal_healthy()
        ctx.set_note(role)
        ctx.log.info("%s, serving at %s:%d", role, self.config.address, self.config.port)
        self.role.set(role)

    @contextlib.asynccontextmanager
    async def _serving(
        self,
        *services: object,
        gate: NodeGate | None = None,
        revocations: Revocations | None = None,
        extensions: Sequence[CuratorExtension] = (),
        leader: CuratorLeader | None = None,
    ) -> AsyncIterator[grpc.aio.Server]:
        """A started server of ``services`` and, with ``leader``, the ``extensions``'
        (plugins' services), refusing the nodes ``gate`` refuses and the users
        ``revocations`` name; stopped without grace on exit."""
        server = create_server(
            self.config.node,
            gate=gate,
            revocations=revocations,
            stats=self.config.stats.rpc if self.config.stats is not None else None,
            # A leader sends each change to every node's stream: encrypted and written off
            # the event loop where the node process turned gRPC's experiment on.
            options=ENCRYPTION_OFFLOAD_OPTIONS,
        )
        for service in services:
            _add(server, service)
        if leader is not None:
            _extend(server, extensions, leader)
        endpoint = f"{self.config.address}:{self.config.port}"
        bind(server, endpoint, self.config.node, self.config.current_node)
        await server.start()
        try:
            yield server
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop(None)

    async def _leader_state(self, client: EtcdClient, leadership: Leadership) -> LeaderState:
        state = ClusterState(client, leadership)
        secrets = await state.secrets()
        if secrets is None:
            raise RoleserveError("elected, but the cluster was never bootstrapped")
        configuration = await state.configuration()
        interval = configuration.heartbeat_interval.ToNanoseconds() / 1e9
        policy = replace(self.config.maintenance, retention=history_retention(configuration))
        return LeaderState(
            node_id=self.config.node.node_id,
            client=client,
            etcd_credentials=self.config.etcd,
            leadership=leadership,
            state=state,
            authority=ClusterAuthority.from_secrets(secrets),
            cache=NodeCache(client),
            heartbeats=Heartbeats(self.config.clock, interval or DEFAULT_HEARTBEAT_INTERVAL),
            network=ClusterNetwork.of(configuration),
            revoked=RevokedSerials(client),
            maintenance=EtcdMaintenance(client, self.config.etcd, self.config.clock, policy),
        )

    async def _promote_learners(
        self, leader: LeaderState, promoted: Callable[[], None] = lambda: None
    ) -> None:
        """Promote every started learner that has caught up, every ``promote_every`` s;
        ``promoted`` is called after each promotion."""
        while True:
            await anyio.sleep(self.config.promote_every)
            try:
                members = await leader.client.members()
            except EtcdRequestError:
                continue
            for member in members:
                # Only a learner that answers itself: etcd judges readiness by the leader's
                # progress, so it would promote a learner that died after catching up, and
                # a one-voter cluster would lose its quorum to a dead second voter (seen
                # with a join crashed before its membership record was written).
                if member.is_learner and member.name and await _answers(leader, member):
                    with contextlib.suppress(EtcdRequestError):  # not caught up yet
                        await leader.client.promote(member.id)
                        log.info("promoted learner %s", member.name)
                        promoted()


async def _answers(leader: LeaderState, member: Member) -> bool:
    """Whether ``member`` answers a status request itself, knowing a leader."""
    return (await leader.membership.health(member)).healthy


async def allocate_missing_prefixes(state: ClusterState, network: ClusterNetwork) -> int:
    """Give every approved node without a prefix one (a cluster made before prefixes
    existed, or approvals a full network refused prefixes to); how many were given.

    Runs once when a curator starts leading. An etcd error is retried; a full network is
    logged and ends the pass (approvals then say so too); a lost leadership ends it quietly
    (the term is over, the next leader runs it again).
    """
    allocate = functools.partial(_allocate_missing, state, network)
    try:
        return await retry(allocate, retry_on=EtcdRequestError, backoff=ETCD_RETRY)
    except PrefixesExhaustedError as exc:
        log.warning("approved nodes are left without a prefix: %s", exc)
        return 0
    except LeadershipLostError:
        return 0


async def _allocate_missing(state: ClusterState, network: ClusterNetwork) -> int:
    """One pass of ``allocate_missing_prefixes``."""
    nodes, _ = await state.nodes()
    given = 0
    for record in nodes:
        if record.state in APPROVED_STATES and not record.cluster_prefix:
            with contextlib.suppress(NodeNotFoundError):
                updated = await state.update_node(record.id, _unchanged, allocate=network)
                log.info("allocated %s to node %s", updated.cluster_prefix, record.id)
                given += 1
    return given


class QuorumNotice:
    """Says a lost quorum in a curator runnable's note and log, once per change of who
    answers: ``<doing>: no quorum (1 of 3 members answer)``, and ``plain`` again (with an
    INFO line) once the quorum is back."""

    def __init__(self, ctx: RunContext, doing: str, plain: str) -> None:
        self.ctx = ctx
        self.doing = doing
        self.plain = plain
        self._said: str | None = None

    def show(self, report: QuorumReport | None) -> None:
        """Show ``report`` (None: there is a quorum, or the member cannot tell)."""
        described = report.describe() if report is not None else None
        if described == self._said:
            return
        if report is not None:
            self.ctx.log.warning("%s: %s", self.doing, described)
            self.ctx.set_note(f"{self.doing}: {report.summary()}")
        else:
            self.ctx.log.info("the consensus has a quorum again")
            self.ctx.set_note(self.plain)
        self._said = described


def _unchanged(record: state_pb2.NodeRecord) -> None:
    """A change that changes nothing (the allocation does)."""


def _add(server: grpc.aio.Server, service: object) -> None:
    if isinstance(service, NotLeadingHandler):
        server.add_generic_rpc_handlers((service,))
    elif isinstance(service, CuratorService):
        add_curator_service(service, server)
    elif isinstance(service, CuratorLocalService):
        curator_pb2_grpc.add_CuratorLocalServicer_to_server(service, server)
    elif isinstance(service, ManagementService):
        management_pb2_grpc.add_ManagementServicer_to_server(service, server)
    else:
        raise TypeError(f"not a curator service: {service!r}")


def _extend(
    server: grpc.aio.Server, extensions: Sequence[CuratorExtension], leader: CuratorLeader
) -> None:
    """Add the plugins' services; one whose ``add`` raises is left out with one ERROR
    line, and the curator leads without it."""
    for extension in extensions:
        try:
            extension.add(server, leader)
        except Exception as exc:
            log.error("plugin %r: its curator services left out: %s", extension.plugin, exc)


def leader_snapshot(leader: LeaderState, watch_streams: int) -> LeaderSnapshot:
    """Nodes by state and health (as ``GetNodes`` reports them), open Watch streams, and
    what etcd's maintenance did.

    States and healths are named as ``ctl nodes`` shows them (``UP``, ``HEALTHY``,
    ``UNKNOWN``), without the enums' prefixes: the metrics' labels are these names, and a
    query written from what ctl says must match them.
    """
    nodes: dict[tuple[str, str], int] = {}
    for record in leader.cache.nodes.values():
        health = leader.heartbeats.health(record.id, record.state)
        key = (
            common_pb2.NodeState.Name(record.state).removeprefix("NODE_STATE_"),
            management_pb2.Node.Health.Name(health).removeprefix("HEALTH_"),
        )
        nodes[key] = nodes.get(key, 0) + 1
    maintenance = leader.maintenance.statistics()
    return LeaderSnapshot(
        nodes,
        watch_streams,
        compacted_revision=maintenance.compacted_revision,
        compacted_at=maintenance.compacted_at,
        defragmentations=maintenance.defragmentations,
    )
