"""A cluster of curators on real etcd, whose nodes enrol the way real nodes do.

::

    bootstrap()           node 0: bootstrap material → etcd bootstraps → records written →
                          its curator campaigns and leads
    enrol(i)              node i: RegisterNode (ticket, ephemeral certificate) → owner
                          approves → CommitNode → UpdateNodeStatus (its address)
    add_consensus(i)      enrol(i), then make_consensus_member(node): owner assigns
                          consensus_member → the curator adds a learner and fills the
                          role → node i's etcd joins with the role's certificate and
                          peers → the leader promotes it → node i's curator starts

Until the controlplane worker exists, this harness plays its part (starting etcd and the
curator from the role); everything else goes through the curator's API over mutual TLS.
"""

from __future__ import annotations

import datetime
import ipaddress
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio

from roleserve_controlplane.consensus import DEFAULT_RETENTION, MaintenancePolicy
from roleserve_controlplane.curator import (
    DEFAULT_NODE_CERTIFICATE_LIFETIME,
    BootstrapMaterial,
    Curator,
    CuratorConfig,
    write_bootstrap,
)
from roleserve_controlplane.curator.extension import CuratorExtension
from roleserve_controlplane.testing.etcd import EtcdCluster, RunningMember
from roleserve_core import (
    Bootstrapped,
    Clock,
    MonotonicClock,
    NodeRoles,
    Supervisor,
    Value,
    common_pb2,
    curator_pb2,
    curator_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
    roles_from_proto,
)
from roleserve_core.identity import (
    Credentials,
    EphemeralCredentials,
    NodeCredentials,
    PrivateKey,
    UserCredentials,
    certificate_from_pem,
    generate_key,
    node_id,
    public_key_der,
)
from roleserve_core.rpc import CancellationSafeChannel, secure_channel
from roleserve_core.testing import SupervisorRunner, wait_for_value

__all__ = ["CuratorCluster", "CuratorNode", "change_roles", "enrol_node", "update_roles"]

TEST_TTL = 2
"""Seconds of the election lease in tests: failover within a few seconds."""


@dataclass
class CuratorNode:
    """One node of a ``CuratorCluster``."""

    index: int
    key: PrivateKey
    address: ipaddress.IPv4Address
    credentials: NodeCredentials | None = None
    member: RunningMember | None = None
    curator: Curator | None = None
    supervisor: Supervisor | None = None

    @property
    def node_id(self) -> str:
        """The node's ID."""
        assert self.credentials is not None
        return self.credentials.node_id

    @property
    def endpoint(self) -> str:
        """Its curator's ``host:port``."""
        return f"{self.address}:7835"


@dataclass
class CuratorCluster:
    """Curators on an ``EtcdCluster``. Use as ``async with``: the curators stop at its end
    (the etcd members with the ``EtcdCluster``'s own end); ``crash`` stops one earlier."""

    etcd: EtcdCluster
    heartbeat_interval: float = 5.0
    lease_ttl: int = TEST_TTL
    """Seconds of the election lease: short in tests, for quick failovers."""
    node_certificate_lifetime: datetime.timedelta = DEFAULT_NODE_CERTIFICATE_LIFETIME
    """The cluster configuration's node certificate lifetime, written by ``bootstrap``."""
    extensions: Sequence[CuratorExtension] = ()
    """Plugins' services every leading curator serves (``roleserve_curator_services``)."""
    history_retention: float = DEFAULT_RETENTION
    """The cluster configuration's etcd history retention, written by ``bootstrap``."""
    maintenance: MaintenancePolicy = field(default_factory=MaintenancePolicy)
    """Each curator's defragmentation thresholds and quota."""
    clock: Clock = field(default_factory=MonotonicClock)
    """The curators' clock (heartbeats, etcd's maintenance): a test of maintenance passes a
    ``FakeClock`` and drives the periods."""
    nodes: list[CuratorNode] = field(default_factory=list)
    owner: UserCredentials | None = None
    consensus_ca: bytes = b""
    _runner: SupervisorRunner = field(default_factory=lambda: SupervisorRunner(MonotonicClock()))

    async def __aenter__(self) -> CuratorCluster:
        await self._runner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._runner.__aexit__(exc_type, exc, tb)

    async def crash(self, node: CuratorNode) -> None:
        """What a crash of ``node`` does to the cluster: its etcd member is killed
        (SIGKILL), then its curator stops without reaching etcd, so its lease is left to
        expire rather than revoked."""
        assert node.member is not None
        node.member.kill()
        await self._stop_curator(node)

    async def stop(self, node: CuratorNode) -> None:
        """What a clean stop of ``node`` (SIGTERM) does: its supervisor cancels its etcd
        member and its curator at the same moment; the member serves until the curator
        has ended (``EtcdMember.serving_for``), so a leader revokes its lease on the way
        out. (The etcd cluster needs ``stop_supervisor``.)"""
        assert node.member is not None
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(node.member.stop)
            tasks.start_soon(self._stop_curator, node)

    async def leave_consensus(self, node: CuratorNode) -> None:
        """What ``node`` does once its consensus_member role is gone: its controlplane
        worker stops its curator. (Its etcd member, removed from the cluster, exits by
        itself.)"""
        await self._stop_curator(node)

    async def restart_curator(self, node: CuratorNode) -> None:
        """Stop ``node``'s curator (its lease revoked, as at a clean stop) and start a new
        one on the same etcd member; it campaigns again."""
        assert node.member is not None
        await self._stop_curator(node)
        await self._start_curator(node, node.member.config.credentials)

    async def _stop_curator(self, node: CuratorNode) -> None:
        supervisor, node.supervisor = node.supervisor, None
        if supervisor is not None:
            await self._runner.stop(supervisor)

    # -- channels -----------------------------------------------------------------

    def channel(self, node: CuratorNode, credentials: Credentials) -> CancellationSafeChannel:
        """A channel to ``node``'s curator, verifying it is that node."""
        return secure_channel(node.endpoint, credentials, node_id=node.node_id)

    def management(self, node: CuratorNode) -> tuple[CancellationSafeChannel, Any]:
        """An owner's channel to ``node`` and a ``Management`` stub on it."""
        assert self.owner is not None
        channel = self.channel(node, self.owner)
        return channel, management_pb2_grpc.ManagementStub(channel)

    async def leader(self, *, timeout: float = 30) -> CuratorNode:
        """The node whose curator leads (waits for one, on the curators' role values)."""
        leading: list[CuratorNode] = []
        with anyio.fail_after(timeout):
            async with anyio.create_task_group() as tasks:

                async def watch(node: CuratorNode, role: Value[str]) -> None:
                    await wait_for_value(role, lambda now: now == "leading", timeout=timeout)
                    leading.append(node)
                    tasks.cancel_scope.cancel()

                for node in self.nodes:
                    if node.curator is not None and node.supervisor is not None:
                        tasks.start_soon(watch, node, node.curator.role)
        return leading[0]

    # -- building -----------------------------------------------------------------

    async def bootstrap(self) -> CuratorNode:
        """Node 0 bootstraps the cluster; returns it once its curator leads."""
        node = CuratorNode(0, generate_key(), self.etcd.address(0))
        material = BootstrapMaterial.create(
            node.key, node.address, lifetime=self.node_certificate_lifetime
        )
        node.credentials = material.node
        self.owner = material.owner
        self.consensus_ca = material.consensus_ca_pem
        config = self.etcd.config(0, name=node.node_id, credentials=material.member)
        node.member = await self.etcd.start(config)
        async with node.member.client(material.member) as client:
            await write_bootstrap(
                client,
                material,
                node.address,
                heartbeat_interval=self.heartbeat_interval,
                node_certificate_lifetime=self.node_certificate_lifetime,
                history_retention=self.history_retention,
            )
        self.nodes.append(node)
        await self._start_curator(node, material.member)
        await wait_for_value(node.curator.role, lambda role: role == "leading", timeout=30)  # type: ignore[union-attr]
        return node

    async def enrol(self, index: int) -> CuratorNode:
        """Node ``index`` registers, is approved, commits and reports its address."""
        leader = await self.leader()
        node = CuratorNode(index, generate_key(), self.etcd.address(index))
        assert self.owner is not None
        node.credentials = await enrol_node(
            leader.endpoint, leader.node_id, self.owner, node.key, node.address
        )
        self.nodes.append(node)
        return node

    async def add_consensus(self, index: int) -> CuratorNode:
        """Enrol node ``index`` and make it a consensus member with a curator."""
        return await self.make_consensus_member(await self.enrol(index))

    async def make_consensus_member(self, node: CuratorNode) -> CuratorNode:
        """Give the enrolled ``node`` the consensus_member role, start its etcd member as
        the role says, and its curator once the member votes."""
        index = node.index
        leader = await self.leader()
        channel, management = self.management(leader)
        async with channel:
            change = management_pb2.UpdateNodeRolesRequest.Change(
                role="consensus_member", assign=True
            )
            response = await management.UpdateNodeRoles(
                management_pb2.UpdateNodeRolesRequest(node_id=node.node_id, changes=[change])
            )
        role = response.roles.consensus_member
        member_credentials = Credentials(
            node.key,
            certificate_from_pem(role.peer_certificate),
            certificate_from_pem(role.ca_certificate),
        )
        peers = {peer.name: peer.url for peer in role.peers}
        config = self.etcd.config(index, peers, name=node.node_id, credentials=member_credentials)
        node.member = await self.etcd.start(config)
        await self._start_curator(node, member_credentials)  # it waits until its member votes
        await wait_for_value(node.curator.role, lambda role: role != "waiting", timeout=30)  # type: ignore[union-attr]
        return node

    async def _start_curator(self, node: CuratorNode, member: Credentials) -> None:
        assert node.credentials is not None
        assert node.member is not None
        credentials = node.credentials  # the curator presents the node's latest ones
        node.curator = Curator(
            CuratorConfig(
                node=node.credentials,
                etcd=member,
                etcd_endpoints=[node.member.config.endpoint],
                address=node.address,
                lease_ttl=self.lease_ttl,
                promote_every=0.2,
                clock=self.clock,
                maintenance=self.maintenance,
                current_node=lambda: node.credentials or credentials,
                extensions=self.extensions,
            )
        )
        # Served by its member, as the controlplane worker runs it (``serving_for``).
        node.supervisor = await self._runner.start(node.member.runnable.serving_for(node.curator))


async def enrol_node(
    endpoint: str,
    leader_id: str,
    owner: UserCredentials,
    key: PrivateKey,
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> NodeCredentials:
    """Enrol the node of ``key`` through the leading curator at ``endpoint``, as a real node
    does with an operator's help: register (ticket, ephemeral certificate), the owner
    approves, commit, report its ``address``. Returns its node credentials."""
    join_key = generate_key()
    async with secure_channel(endpoint, owner, node_id=leader_id) as channel:
        management = management_pb2_grpc.ManagementStub(channel)
        ticket = await management.GetRegisterTicket(management_pb2.GetRegisterTicketRequest())
        info = await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
        ca = certificate_from_pem(info.ca_certificate)
        ephemeral = EphemeralCredentials.for_key(key, ca)
        async with secure_channel(endpoint, ephemeral, node_id=leader_id) as enrolling:
            curator = curator_pb2_grpc.CuratorStub(enrolling)
            await curator.RegisterNode(
                curator_pb2.RegisterNodeRequest(
                    register_ticket=ticket.ticket, join_key=public_key_der(join_key.public_key())
                )
            )
            await management.ApproveNode(
                management_pb2.ApproveNodeRequest(node_id=node_id(key.public_key()))
            )
            committed = await curator.CommitNode(curator_pb2.CommitNodeRequest())
    credentials = NodeCredentials(key, certificate_from_pem(committed.node_certificate), ca)
    async with secure_channel(endpoint, credentials, node_id=leader_id) as own:
        status = common_pb2.NodeStatus(external_address=str(address))
        await curator_pb2_grpc.CuratorStub(own).UpdateNodeStatus(
            curator_pb2.UpdateNodeStatusRequest(node_id=credentials.node_id, status=status)
        )
    return credentials


async def update_roles(
    first: Bootstrapped, endpoint: str, node_id: str, role: str, assign: bool
) -> NodeRoles:
    """Assign or remove ``role`` of ``node_id`` as ``first``'s owner, through the leader at
    ``endpoint``; the node's roles after the change."""
    async with secure_channel(endpoint, first.owner, node_id=first.node.node_id) as channel:
        change = management_pb2.UpdateNodeRolesRequest.Change(role=role, assign=assign)
        response = await management_pb2_grpc.ManagementStub(channel).UpdateNodeRoles(
            management_pb2.UpdateNodeRolesRequest(node_id=node_id, changes=[change])
        )
    return roles_from_proto(response.roles)


async def change_roles(
    curators: CuratorCluster,
    node: CuratorNode,
    changes: int,
    *,
    observe: Callable[[float], None] | None = None,
) -> None:
    """Change a custom role's parameter of ``node`` (``custom:churn``, ``n``: 0, 1, ...)
    ``changes`` times through the leader's ``Management``, as an operator would: the churn
    of the maintenance tests and benchmarks.

    :param observe: called with each change's seconds.
    """
    channel, management = curators.management(await curators.leader())
    async with channel:
        for index in range(changes):
            change = management_pb2.UpdateNodeRolesRequest.Change(
                role="custom:churn", assign=True, parameters={"n": str(index)}
            )
            started = time.perf_counter()
            await management.UpdateNodeRoles(
                management_pb2.UpdateNodeRolesRequest(node_id=node.node_id, changes=[change])
            )
            if observe is not None:
                observe(time.perf_counter() - started)
