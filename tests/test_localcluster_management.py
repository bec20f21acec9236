"""``LeaderManagement``: a local cluster's Management calls follow the leader.

A fake curator on real gRPC with mutual TLS (a random loopback address of the test's own)
names itself the leader and answers ``Management`` after refusing the first calls with
UNAVAILABLE or CANCELLED, as a curator does that stopped leading while a stopped cluster comes back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import grpc
import pytest
from typing_extensions import override

from roleserve_core.access import ClusterAccess
from roleserve_core.connection import NoLeaderError
from roleserve_core.localcluster.management import LeaderManagement
from roleserve_core.ports import endpoint
from roleserve_core.proto import curator_pb2, curator_pb2_grpc, management_pb2, management_pb2_grpc
from roleserve_core.rpc import bind, create_server
from roleserve_core.testing import ThrowawayCA, random_loopback

pytestmark = pytest.mark.anyio

Context = Any
GONE = "not the leader any more; ask CuratorLocal for the new leader"


class Curator(curator_pb2_grpc.CuratorLocalServicer, management_pb2_grpc.ManagementServicer):
    """Leads; refuses the first ``refusals`` Management calls with ``code``."""

    def __init__(self, node_id: str, refusals: int, code: grpc.StatusCode) -> None:
        self.node_id, self.refusals, self.code = node_id, refusals, code
        self.host, self.port = "", 0
        self.calls = 0

    @override
    async def GetCurrentLeader(
        self, request: curator_pb2.GetCurrentLeaderRequest, context: Context
    ) -> AsyncIterator[curator_pb2.GetCurrentLeaderResponse]:
        yield curator_pb2.GetCurrentLeaderResponse(
            leader_node_id=self.node_id,
            leader_host=self.host,
            leader_port=self.port,
            this_node_id=self.node_id,
        )
        await asyncio.get_running_loop().create_future()  # until the client cancels

    async def _answer(self, context: Context) -> None:
        self.calls += 1
        if self.calls <= self.refusals:
            await context.abort(self.code, GONE)

    @override
    async def GetClusterInfo(
        self, request: management_pb2.GetClusterInfoRequest, context: Context
    ) -> management_pb2.GetClusterInfoResponse:
        await self._answer(context)
        return management_pb2.GetClusterInfoResponse(ca_certificate=b"the CA")

    @override
    async def GetNodes(
        self, request: management_pb2.GetNodesRequest, context: Context
    ) -> AsyncIterator[management_pb2.Node]:
        await self._answer(context)
        for name in ("node-a", "node-b"):
            yield management_pb2.Node(id=name)


class SlowListing(Curator):
    """Refuses only the first ``GetClusterInfo``, and lists its nodes only once a
    ``GetClusterInfo`` was answered: a listing is on the channel while another call is
    refused."""

    def __init__(self, node_id: str, refusals: int, code: grpc.StatusCode) -> None:
        super().__init__(node_id, 0, code)
        self.info_calls = 0
        self.listing = asyncio.Event()
        self.answered = asyncio.Event()

    @override
    async def GetClusterInfo(
        self, request: management_pb2.GetClusterInfoRequest, context: Context
    ) -> management_pb2.GetClusterInfoResponse:
        self.info_calls += 1
        if self.info_calls == 1:
            await context.abort(self.code, GONE)
        self.answered.set()
        return management_pb2.GetClusterInfoResponse(ca_certificate=b"the CA")

    @override
    async def GetNodes(
        self, request: management_pb2.GetNodesRequest, context: Context
    ) -> AsyncIterator[management_pb2.Node]:
        self.listing.set()
        await self.answered.wait()
        yield management_pb2.Node(id="node-a")


async def serve(
    ca: ThrowawayCA,
    refusals: int,
    code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
    kind: Callable[[str, int, grpc.StatusCode], Curator] = Curator,
) -> tuple[Curator, grpc.aio.Server, ClusterAccess]:
    node = ca.node()
    # The base class answers UNIMPLEMENTED for the methods the fake leaves out.
    curator = kind(node.node_id, refusals, code)
    server = create_server(node)
    curator_pb2_grpc.add_CuratorLocalServicer_to_server(curator, server)
    management_pb2_grpc.add_ManagementServicer_to_server(curator, server)
    curator.host = str(random_loopback())
    curator.port = bind(server, endpoint(curator.host, 0), node)
    await server.start()
    return curator, server, ClusterAccess.of(ca.user(), [endpoint(curator.host, curator.port)])


@pytest.fixture
def ca() -> ThrowawayCA:
    return ThrowawayCA()


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED])
async def test_a_call_refused_as_not_leading_is_made_again_on_the_leader(
    ca: ThrowawayCA, code: grpc.StatusCode
) -> None:
    """UNAVAILABLE: it stopped leading before the call; CANCELLED: during it (its handler
    was cancelled with its leadership; CI saw a GetNodes end so while members rejoined)."""
    curator, server, access = await serve(ca, refusals=2, code=code)
    management = LeaderManagement(access, patience=30)
    try:
        with anyio.fail_after(30):
            info = await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
            assert info.ca_certificate == b"the CA"
            assert curator.calls == 3
            nodes = await management.stream("GetNodes", management_pb2.GetNodesRequest())
    finally:
        await management.aclose()
        await server.stop(None)
    assert [node.id for node in nodes] == ["node-a", "node-b"]


async def test_a_refused_call_leaves_the_calls_made_alongside_it_to_finish(
    ca: ThrowawayCA,
) -> None:
    """Closing the channel of a refused call cancelled every other call on it, which
    grpc.aio raises as CancelledError: a task of ``cluster up`` giving a node its roles
    ended silently, as if cancelled, and ``up`` said the cluster was up without them."""
    curator, server, access = await serve(ca, refusals=0, kind=SlowListing)
    assert isinstance(curator, SlowListing)
    management = LeaderManagement(access, patience=30)
    listed: list[str] = []

    async def list_nodes() -> None:
        nodes = await management.stream("GetNodes", management_pb2.GetNodesRequest())
        listed.extend(node.id for node in nodes)

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(list_nodes)
                await curator.listing.wait()
                info = await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
    finally:
        await management.aclose()
        await server.stop(None)
    assert (info.ca_certificate, curator.info_calls) == (b"the CA", 2)
    assert listed == ["node-a"]


async def test_any_other_refusal_is_the_callers_at_once(ca: ThrowawayCA) -> None:
    curator, server, access = await serve(ca, refusals=1, code=grpc.StatusCode.PERMISSION_DENIED)
    management = LeaderManagement(access, patience=30)
    try:
        with anyio.fail_after(30), pytest.raises(grpc.aio.AioRpcError) as raised:
            await management.stream("GetNodes", management_pb2.GetNodesRequest())
    finally:
        await management.aclose()
        await server.stop(None)
    assert (raised.value.code(), raised.value.details()) == (
        grpc.StatusCode.PERMISSION_DENIED,
        GONE,
    )
    assert curator.calls == 1


async def test_after_its_patience_a_call_fails_as_no_leader_naming_the_last_refusal(
    ca: ThrowawayCA,
) -> None:
    """A NoLeaderError, which ``cluster up`` says in one line; before, the last gRPC error
    itself reached the command as a traceback."""
    curator, server, access = await serve(ca, refusals=1_000_000)
    management = LeaderManagement(access, patience=0.5)
    try:
        with anyio.fail_after(30), pytest.raises(NoLeaderError) as raised:
            await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
    finally:
        await management.aclose()
        await server.stop(None)
    assert "no leader answered within 0.5 s (the last: " in str(raised.value)
    assert isinstance(raised.value.__cause__, grpc.aio.AioRpcError)
    assert raised.value.__cause__.code() == grpc.StatusCode.UNAVAILABLE
    assert curator.calls > 1


async def test_with_no_curator_at_all_a_call_fails_naming_the_endpoints(ca: ThrowawayCA) -> None:
    """Its patience can run out while the first leader is still sought: a clear error, not
    a failed assertion."""
    nowhere = endpoint(str(random_loopback()), 9)
    management = LeaderManagement(ClusterAccess.of(ca.user(), [nowhere]), patience=0.5)
    try:
        with anyio.fail_after(30), pytest.raises(NoLeaderError, match=nowhere):
            await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
    finally:
        await management.aclose()
