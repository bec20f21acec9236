"""The curator's API driven step by step, for tests of its RPCs.

``CuratorCluster.enrol`` takes a node all the way (register, approve, commit, status);
``CuratorApi`` stops at any step, so that a test can call each RPC with each kind of caller
and in each node state::

    Applicant()                 a node key and a join key, nothing registered yet
    api.register(applicant)     RegisterNode with the ticket, as the applicant (NEW)
    api.approve(node_id)        the owner's ApproveNode (STANDBY)
    api.commit(applicant)       CommitNode (UP) → the node's credentials
    api.watching(request)       an open Watch stream, and the nodes it has shown
    api.settled(predicate)      wait until the leader's node cache satisfies ``predicate``

The leader serves GetNodes and Watch from its node cache, which follows etcd a moment after
each write; ``settled`` waits for it, where a test reads what it has just written.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field

import anyio
import grpc
import pytest
from cryptography import x509

from roleserve_controlplane.testing.curator import CuratorCluster, CuratorNode
from roleserve_core import (
    NodeWatchFold,
    common_pb2,
    curator_pb2,
    curator_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
)
from roleserve_core.identity import (
    Credentials,
    EphemeralCredentials,
    NodeCredentials,
    PrivateKey,
    certificate_from_pem,
    generate_key,
    node_id,
    public_key_der,
)
from roleserve_core.testing import DEFAULT_TIMEOUT

__all__ = ["Applicant", "CuratorApi", "NodeWatch", "labels", "refused", "status"]

Nodes = Mapping[str, curator_pb2.Node]
"""Node ID → the node, as a Watch stream has shown it so far."""


@contextlib.contextmanager
def refused(code: grpc.StatusCode, message: str) -> Iterator[None]:
    """Expect the block to fail with status ``code``, with ``message`` in its details."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        yield
    details = caught.value.details() or ""
    assert caught.value.code() == code, f"{caught.value.code()}: {details}"
    assert message in details, f"{message!r} not in {details!r}"


def status(address: object, **fields: object) -> common_pb2.NodeStatus:
    """A node status reporting ``address``."""
    return common_pb2.NodeStatus(external_address=str(address), **fields)  # type: ignore[arg-type]


def labels(**pairs: str) -> common_pb2.NodeLabels:
    """Node labels from keyword arguments."""
    return common_pb2.NodeLabels(
        pairs=[common_pb2.NodeLabels.Pair(key=k, value=v) for k, v in pairs.items()]
    )


@dataclass(frozen=True)
class Applicant:
    """A node that has not enrolled yet: its node key, and the join key it will register."""

    key: PrivateKey = field(default_factory=generate_key)
    join_key: PrivateKey = field(default_factory=generate_key)

    @property
    def node_id(self) -> str:
        """The ID its node key gives it."""
        return node_id(self.key.public_key())

    def ephemeral(self, ca: x509.Certificate) -> EphemeralCredentials:
        """Its ephemeral credentials: register and commit with these."""
        return EphemeralCredentials.for_key(self.key, ca)

    def joining(self, ca: x509.Certificate) -> EphemeralCredentials:
        """Ephemeral credentials of its join key: join with these."""
        return EphemeralCredentials.for_key(self.join_key, ca)


class NodeWatch:
    """An open Watch stream, and the nodes its events have shown so far (folded by the
    core's ``NodeWatchFold``, as ``cluster_nodes`` is)."""

    def __init__(
        self, call: grpc.aio.UnaryStreamCall[curator_pb2.WatchRequest, curator_pb2.WatchEvent]
    ) -> None:
        self.call = call
        self.fold = NodeWatchFold()

    @property
    def nodes(self) -> dict[str, curator_pb2.Node]:
        """Node ID → the node, as the events so far have shown it."""
        return self.fold.nodes

    @property
    def backlogged(self) -> bool:
        """Whether the snapshot has been read (its last event carries the marker)."""
        return self.fold.backlogged

    async def next(self) -> curator_pb2.WatchEvent:
        """The next event (fails the test if none comes in time)."""
        with anyio.fail_after(DEFAULT_TIMEOUT):
            event = await self.call.read()
        assert isinstance(event, curator_pb2.WatchEvent), "the Watch stream ended"
        self.fold.apply(event)
        return event

    async def snapshot(self) -> list[curator_pb2.WatchEvent]:
        """The events of the snapshot, up to the one marked as the last."""
        events = [await self.next()]
        while not self.backlogged:
            events.append(await self.next())
        return events

    async def until(self, predicate: Callable[[Nodes], object]) -> Nodes:
        """Read the snapshot, then events until the nodes shown satisfy ``predicate``.

        A predicate that looks up a node not shown yet (``KeyError``) is not satisfied.
        """
        if not self.backlogged:
            await self.snapshot()
        while not _holds(predicate, self.nodes):
            await self.next()
        return self.nodes


def _holds(predicate: Callable[[Nodes], object], nodes: Nodes) -> bool:
    try:
        return bool(predicate(nodes))
    except KeyError:
        return False


@dataclass
class CuratorApi:
    """Calls to the leading curator of ``cluster``, as nodes, applicants or the owner."""

    cluster: CuratorCluster

    @property
    def ca(self) -> x509.Certificate:
        """The cluster CA."""
        ca = self.owner.ca_certificate
        assert ca is not None
        return ca

    @property
    def owner(self) -> Credentials:
        """The owner's credentials."""
        assert self.cluster.owner is not None
        return self.cluster.owner

    @contextlib.asynccontextmanager
    async def curator(
        self, credentials: Credentials, node: CuratorNode | None = None
    ) -> AsyncIterator[curator_pb2_grpc.CuratorAsyncStub]:
        """A ``Curator`` stub on a channel to ``node`` (the leader) with ``credentials``."""
        async with self.cluster.channel(node or await self.cluster.leader(), credentials) as ch:
            yield curator_pb2_grpc.CuratorStub(ch)

    @contextlib.asynccontextmanager
    async def local(
        self, credentials: Credentials, node: CuratorNode | None = None
    ) -> AsyncIterator[curator_pb2_grpc.CuratorLocalAsyncStub]:
        """A ``CuratorLocal`` stub on a channel to ``node`` (the leader)."""
        async with self.cluster.channel(node or await self.cluster.leader(), credentials) as ch:
            yield curator_pb2_grpc.CuratorLocalStub(ch)

    @contextlib.asynccontextmanager
    async def management(
        self, credentials: Credentials | None = None
    ) -> AsyncIterator[management_pb2_grpc.ManagementAsyncStub]:
        """A ``Management`` stub on a channel to the leader, as the owner by default."""
        leader = await self.cluster.leader()
        async with self.cluster.channel(leader, credentials or self.owner) as channel:
            yield management_pb2_grpc.ManagementStub(channel)

    async def ticket(self) -> bytes:
        """The register ticket."""
        async with self.management() as management:
            response = await management.GetRegisterTicket(management_pb2.GetRegisterTicketRequest())
        return response.ticket

    def register_request(
        self, applicant: Applicant, ticket: bytes, node_labels: common_pb2.NodeLabels | None = None
    ) -> curator_pb2.RegisterNodeRequest:
        """A RegisterNode request of ``applicant``."""
        return curator_pb2.RegisterNodeRequest(
            register_ticket=ticket,
            join_key=public_key_der(applicant.join_key.public_key()),
            labels=node_labels,
        )

    async def register(
        self, applicant: Applicant, node_labels: common_pb2.NodeLabels | None = None
    ) -> str:
        """Register ``applicant`` with the cluster's ticket; returns the node ID."""
        request = self.register_request(applicant, await self.ticket(), node_labels)
        async with self.curator(applicant.ephemeral(self.ca)) as curator:
            return (await curator.RegisterNode(request)).node_id

    async def approve(self, node: str) -> None:
        """The owner approves ``node``."""
        async with self.management() as management:
            await management.ApproveNode(management_pb2.ApproveNodeRequest(node_id=node))

    async def decommission(self, node: str) -> None:
        """The owner decommissions ``node``."""
        async with self.management() as management:
            await management.DecommissionNode(management_pb2.DecommissionNodeRequest(node_id=node))

    async def commit(self, applicant: Applicant) -> curator_pb2.CommitNodeResponse:
        """CommitNode as ``applicant``."""
        async with self.curator(applicant.ephemeral(self.ca)) as curator:
            return await curator.CommitNode(curator_pb2.CommitNodeRequest())

    async def up(self, applicant: Applicant) -> NodeCredentials:
        """Register, approve and commit ``applicant`` (no status reported); its credentials."""
        await self.approve(await self.register(applicant))
        committed = await self.commit(applicant)
        return NodeCredentials(
            applicant.key, certificate_from_pem(committed.node_certificate), self.ca
        )

    @contextlib.asynccontextmanager
    async def watching(
        self,
        request: curator_pb2.WatchRequest | None = None,
        credentials: Credentials | None = None,
    ) -> AsyncIterator[NodeWatch]:
        """An open Watch stream (of every node, as the owner, by default)."""
        request = request or curator_pb2.WatchRequest(
            nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster()
        )
        async with self.curator(credentials or self.owner) as curator:
            call = curator.Watch(request)
            try:
                yield NodeWatch(call)
            finally:
                call.cancel()

    async def settled(self, predicate: Callable[[Nodes], object]) -> Nodes:
        """Wait until the leader's node cache (seen through Watch) satisfies ``predicate``."""
        async with self.watching() as watch:
            return await watch.until(predicate)

    async def nodes(self, **filters: object) -> dict[str, management_pb2.Node]:
        """GetNodes with ``filters``: node ID → node."""
        request = management_pb2.GetNodesRequest(**filters)  # type: ignore[arg-type]
        async with self.management() as management:
            return {node.id: node async for node in management.GetNodes(request)}
