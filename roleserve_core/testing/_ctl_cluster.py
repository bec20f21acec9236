"""A fake cluster for ``roleserve ctl``, run through ``main()``: what a test of a ctl
command (the core's, or a plugin's through the ``roleserve.ctl`` entry point) runs against.

The real curator lives in the controlplane plugin, which neither the core's tests nor
another plugin's can depend on, so a fake plays the leading curator: ``Management`` and
``CuratorLocal`` on port 7835 and ``NodeManagement`` on port 7839 of a random loopback
address ``127.X.Y.Z``, the standard ports, as a real node has them (real gRPC with mutual
TLS). The fakes record every request and answer from plain fields a test sets, so a test
compares what was sent and what was printed::

    test ──run_ctl_main("nodes")──▶ main() ──gRPC, mTLS──▶ FakeCuratorLocal, FakeManagement,
      │                              (its own loop)          FakeNodeManagement
      │                                                         │ (on ServerThread's loop)
      └──── reads .received(method), sets .nodes, .refusals ──▶ FakeCtlCluster

``main()`` runs its own event loop (``anyio.run``), so the fake servers run on another
loop, in a thread of their own (``ServerThread``); a test starts and stops them through
it and never sleeps: ``main()`` returns only once its calls were answered. Ctrl-C is a
real SIGINT, sent by a fake once it holds the call, as a terminal would send it.

Not ``FakeCluster``: that one serves fake curators to a node under test, on the test's own
event loop; this one serves a ctl command, the operator's side.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from typing_extensions import override

from roleserve_core.cli import main
from roleserve_core.identity import (
    NodeCredentials,
    Scope,
    certificate_to_pem,
    issue_user_certificate,
)
from roleserve_core.ports import CURATOR_PORT, NODE_MANAGEMENT_PORT
from roleserve_core.proto import (
    common_pb2,
    curator_pb2,
    curator_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
    nodemanagement_pb2,
    nodemanagement_pb2_grpc,
)
from roleserve_core.rpc import bind, create_server
from roleserve_core.testing._cluster import ThrowawayCA
from roleserve_core.testing._curator import random_loopback

__all__ = [
    "FakeCtlCluster",
    "MainResult",
    "RunMain",
    "ServerThread",
    "run_main",
    "start_fake_ctl_cluster",
]

T = TypeVar("T")
Context = Any
Member = management_pb2.GetConsensusStatusResponse.Member

STEP_TIMEOUT = 10.0
"""Seconds a start or stop of the fake servers may take; they take milliseconds."""


class ServerThread:
    """An asyncio loop in a thread of its own, for servers that outlive a ``main()`` call."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        # A daemon: should a test fail to close it, the test run still ends.
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="fake-cluster", daemon=True
        )
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the thread's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(STEP_TIMEOUT)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(STEP_TIMEOUT)
        self.loop.close()


@dataclass
class FakeCtlCluster:
    """What the fake servers answer, and every request they received, in order."""

    address: str
    leader: NodeCredentials
    issuer: ThrowawayCA
    """The cluster's CA: signs IssueCredentials' requests, as the leader signs them."""
    nodes: list[management_pb2.Node] = field(default_factory=list)
    consensus: list[Member] = field(default_factory=list)
    compacted_revision: int = 0
    """Of ``GetConsensusStatus``: the revision, compacted at ``compacted_at``, kept 5 min."""
    compacted_at: int = 1_700_000_000
    """Seconds since the epoch (2023-11-14T22:13:20Z)."""
    ticket: bytes = b"the-register-ticket"
    directory: common_pb2.ClusterDirectory = field(default_factory=common_pb2.ClusterDirectory)
    runnables: list[nodemanagement_pb2.Runnable] = field(default_factory=list)
    values: list[nodemanagement_pb2.Value] = field(default_factory=list)
    stored_logs: list[nodemanagement_pb2.LogEntry] = field(default_factory=list)
    new_logs: list[nodemanagement_pb2.LogEntry] = field(default_factory=list)
    """Sent one per message to a following GetLogs, after which the stream ends."""
    refusals: dict[str, tuple[grpc.StatusCode, str]] = field(default_factory=dict)
    """Method name → the status it answers with instead."""
    interrupt_in: str = ""
    """A method that, once called, presses Ctrl-C in the main thread and never answers."""
    no_quorum: curator_pb2.NoQuorum | None = None
    """Set: GetCurrentLeader names no leader and says this, as a curator without a quorum."""
    hung_leader: tuple[str, str, int] | None = None
    """Set: the next GetCurrentLeader names this leader (node ID, host, port) instead, as a
    follower names a hung leader until its lease runs out; then the fake's own again."""
    requests: list[tuple[str, Any]] = field(default_factory=list)
    server: grpc.aio.Server | None = None
    """Serving, once started (``start_fake_ctl_cluster``); ``stop`` it on the thread."""
    issued: list[management_pb2.IssuedCredentials] = field(default_factory=list)
    """What ListCredentials answers."""
    revoked: set[int] = field(default_factory=set)
    """Serials of the user certificates the servers refuse as revoked (``rpc.Revocations``)."""

    @property
    def ca_pem(self) -> bytes:
        """The cluster CA's certificate, as GetClusterInfo and IssueCredentials send it."""
        return certificate_to_pem(self.issuer.certificate)

    def is_revoked(self, serial: int) -> bool:
        return serial in self.revoked

    async def wait_revoked(self, serial: int) -> None:
        await asyncio.get_running_loop().create_future()  # no test revokes a running call

    def received(self, method: str) -> list[Any]:
        """The requests of ``method``, in order."""
        return [request for name, request in self.requests if name == method]

    async def answer(self, method: str, request: Any, context: Context) -> None:
        """Record the request; refuse it if the test said so."""
        self.requests.append((method, request))
        if method in self.refusals:
            await context.abort(*self.refusals[method])
        if method == self.interrupt_in:
            # Ctrl-C, while main() waits for the answer: asyncio's handler cancels its run.
            # Sent to the main thread itself: a signal to the process may land on another
            # thread, and then nothing wakes the main thread's idle event loop to run the
            # handler.
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            await asyncio.get_running_loop().create_future()

    def node(self, node_id: str) -> management_pb2.Node:
        [node] = [node for node in self.nodes if node.id == node_id]
        return node


class FakeCuratorLocal(curator_pb2_grpc.CuratorLocalServicer):
    """Names the fake's leader, then holds the stream open, as a leading curator does."""

    def __init__(self, cluster: FakeCtlCluster) -> None:
        self.cluster = cluster

    @override
    async def GetCurrentLeader(
        self, request: curator_pb2.GetCurrentLeaderRequest, context: Context
    ) -> AsyncIterator[curator_pb2.GetCurrentLeaderResponse]:
        leader_id = self.cluster.leader.node_id
        if self.cluster.hung_leader is not None:
            (hung_id, host, port), self.cluster.hung_leader = self.cluster.hung_leader, None
            yield curator_pb2.GetCurrentLeaderResponse(
                leader_node_id=hung_id, leader_host=host, leader_port=port, this_node_id=leader_id
            )
            return
        if self.cluster.no_quorum is not None:
            quorum = self.cluster.no_quorum
            yield curator_pb2.GetCurrentLeaderResponse(this_node_id=leader_id, no_quorum=quorum)
            return
        yield curator_pb2.GetCurrentLeaderResponse(
            leader_node_id=leader_id,
            leader_host=self.cluster.address,
            leader_port=CURATOR_PORT,
            this_node_id=leader_id,
        )
        await asyncio.get_running_loop().create_future()  # until the client cancels


class FakeManagement(management_pb2_grpc.ManagementServicer):
    """The leader's cluster management: answers from the fake's fields, applies role
    changes to its nodes, and issues credentials with its CA."""

    def __init__(self, cluster: FakeCtlCluster) -> None:
        self.cluster = cluster

    @override
    async def GetClusterInfo(
        self, request: management_pb2.GetClusterInfoRequest, context: Context
    ) -> management_pb2.GetClusterInfoResponse:
        await self.cluster.answer("GetClusterInfo", request, context)
        return management_pb2.GetClusterInfoResponse(
            cluster_directory=self.cluster.directory, ca_certificate=self.cluster.ca_pem
        )

    @override
    async def GetNodes(
        self, request: management_pb2.GetNodesRequest, context: Context
    ) -> AsyncIterator[management_pb2.Node]:
        await self.cluster.answer("GetNodes", request, context)
        for node in self.cluster.nodes:  # filtering is the real curator's to test
            yield node

    @override
    async def ApproveNode(
        self, request: management_pb2.ApproveNodeRequest, context: Context
    ) -> management_pb2.ApproveNodeResponse:
        await self.cluster.answer("ApproveNode", request, context)
        return management_pb2.ApproveNodeResponse()

    @override
    async def UpdateNodeRoles(
        self, request: management_pb2.UpdateNodeRolesRequest, context: Context
    ) -> management_pb2.UpdateNodeRolesResponse:
        await self.cluster.answer("UpdateNodeRoles", request, context)
        roles = self.cluster.node(request.node_id).roles
        for change in request.changes:
            if change.role.startswith("custom:"):
                name = change.role.removeprefix("custom:")
                roles.custom.pop(name, None)
                if change.assign:
                    roles.custom[name].parameters.update(change.parameters)
            elif change.assign:
                getattr(roles, change.role).SetInParent()
            else:
                roles.ClearField(change.role)  # type: ignore[arg-type]
        return management_pb2.UpdateNodeRolesResponse(roles=roles)

    @override
    async def GetRegisterTicket(
        self, request: management_pb2.GetRegisterTicketRequest, context: Context
    ) -> management_pb2.GetRegisterTicketResponse:
        await self.cluster.answer("GetRegisterTicket", request, context)
        return management_pb2.GetRegisterTicketResponse(ticket=self.cluster.ticket)

    @override
    async def DecommissionNode(
        self, request: management_pb2.DecommissionNodeRequest, context: Context
    ) -> management_pb2.DecommissionNodeResponse:
        await self.cluster.answer("DecommissionNode", request, context)
        return management_pb2.DecommissionNodeResponse()

    @override
    async def GetConsensusStatus(
        self, request: management_pb2.GetConsensusStatusRequest, context: Context
    ) -> management_pb2.GetConsensusStatusResponse:
        await self.cluster.answer("GetConsensusStatus", request, context)
        response = management_pb2.GetConsensusStatusResponse(
            members=self.cluster.consensus, compacted_revision=self.cluster.compacted_revision
        )
        response.history_retention.FromSeconds(300)
        if self.cluster.compacted_revision:
            response.compacted_at.FromSeconds(self.cluster.compacted_at)
        return response

    @override
    async def RebuildConsensusMember(
        self, request: management_pb2.RebuildConsensusMemberRequest, context: Context
    ) -> management_pb2.RebuildConsensusMemberResponse:
        await self.cluster.answer("RebuildConsensusMember", request, context)
        return management_pb2.RebuildConsensusMemberResponse(done="removed member 1, added 2")

    @override
    async def IssueCredentials(
        self, request: management_pb2.IssueCredentialsRequest, context: Context
    ) -> management_pb2.IssueCredentialsResponse:
        await self.cluster.answer("IssueCredentials", request, context)
        issuer = self.cluster.issuer
        key = x509.load_der_x509_csr(request.csr).public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey)
        certificate = issue_user_certificate(
            issuer.key, issuer.certificate, key, request.name, scope=Scope(request.scope)
        )
        return management_pb2.IssueCredentialsResponse(
            certificate=certificate_to_pem(certificate), ca_certificate=self.cluster.ca_pem
        )

    @override
    async def ListCredentials(
        self, request: management_pb2.ListCredentialsRequest, context: Context
    ) -> management_pb2.ListCredentialsResponse:
        await self.cluster.answer("ListCredentials", request, context)
        return management_pb2.ListCredentialsResponse(credentials=self.cluster.issued)

    @override
    async def RevokeCredentials(
        self, request: management_pb2.RevokeCredentialsRequest, context: Context
    ) -> management_pb2.RevokeCredentialsResponse:
        await self.cluster.answer("RevokeCredentials", request, context)
        return management_pb2.RevokeCredentialsResponse()


class FakeNodeManagement(nodemanagement_pb2_grpc.NodeManagementServicer):
    """A node's management (tree, values, logs, restarts), answered from the fake's fields."""

    def __init__(self, cluster: FakeCtlCluster) -> None:
        self.cluster = cluster

    @override
    async def GetSupervisionTree(
        self, request: nodemanagement_pb2.GetSupervisionTreeRequest, context: Context
    ) -> nodemanagement_pb2.GetSupervisionTreeResponse:
        await self.cluster.answer("GetSupervisionTree", request, context)
        return nodemanagement_pb2.GetSupervisionTreeResponse(runnables=self.cluster.runnables)

    @override
    async def GetValues(
        self, request: nodemanagement_pb2.GetValuesRequest, context: Context
    ) -> nodemanagement_pb2.GetValuesResponse:
        await self.cluster.answer("GetValues", request, context)
        if request.name:  # as the node does: that one value (its details are the test's)
            named = [value for value in self.cluster.values if value.name == request.name]
            return nodemanagement_pb2.GetValuesResponse(values=named)
        return nodemanagement_pb2.GetValuesResponse(values=self.cluster.values)

    @override
    async def GetLogs(
        self, request: nodemanagement_pb2.GetLogsRequest, context: Context
    ) -> AsyncIterator[nodemanagement_pb2.GetLogsResponse]:
        await self.cluster.answer("GetLogs", request, context)
        stored = self.cluster.stored_logs
        if request.backlog >= 0:
            stored = stored[len(stored) - request.backlog :]
        yield nodemanagement_pb2.GetLogsResponse(entries=stored)
        if request.follow:
            for entry in self.cluster.new_logs:
                yield nodemanagement_pb2.GetLogsResponse(entries=[entry])

    @override
    async def RestartRunnable(
        self, request: nodemanagement_pb2.RestartRunnableRequest, context: Context
    ) -> nodemanagement_pb2.RestartRunnableResponse:
        await self.cluster.answer("RestartRunnable", request, context)
        return nodemanagement_pb2.RestartRunnableResponse()


async def serve(cluster: FakeCtlCluster) -> grpc.aio.Server:
    """The fake's servers on ``cluster.address``: curator port and node management port."""
    revocations = Revocations(cluster.is_revoked, cluster.wait_revoked)
    server = create_server(cluster.leader, revocations=revocations)
    # The fakes implement what ctl calls (it never asks for the CA certificate alone); the
    # generated base classes answer UNIMPLEMENTED for the rest.
    fake_local = FakeCuratorLocal(cluster)  # type: ignore[abstract]
    fake_node = FakeNodeManagement(cluster)
    curator_pb2_grpc.add_CuratorLocalServicer_to_server(fake_local, server)
    fake_management = FakeManagement(cluster)
    management_pb2_grpc.add_ManagementServicer_to_server(fake_management, server)
    nodemanagement_pb2_grpc.add_NodeManagementServicer_to_server(fake_node, server)
    bind(server, f"{cluster.address}:{CURATOR_PORT}", cluster.leader)
    bind(server, f"{cluster.address}:{NODE_MANAGEMENT_PORT}", cluster.leader)
    await server.start()
    return server


@dataclass(frozen=True)
class Revocations:
    """``rpc.Revocations`` of the fake: the real interceptor asks it."""

    revoked: Any
    wait_revoked: Any


def start_fake_ctl_cluster(
    thread: ServerThread, leader: NodeCredentials, ca: ThrowawayCA
) -> FakeCtlCluster:
    """A fake cluster serving on a random loopback address; ``.server`` to stop it."""
    for attempt in range(3):
        address = str(random_loopback())
        cluster = FakeCtlCluster(address, leader, ca)
        try:
            cluster.server = thread.run(serve(cluster))
        except OSError:  # another process holds that address's ports: take another
            if attempt == 2:
                raise
            continue
        return cluster
    raise AssertionError("unreachable")


@dataclass
class MainResult:
    """What a ``roleserve`` command run through ``main()`` exited with and printed."""

    code: int
    out: str
    err: str


class RunMain(Protocol):
    """``run(*argv)``: a command through ``main()`` (the fixtures ``run_roleserve_main``
    and ``run_ctl_main``)."""

    def __call__(self, *argv: str) -> MainResult: ...


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> MainResult:
    """``roleserve ARGV`` through ``main()``, in this process: a fake's requests and the
    command's output in one test, and monkeypatched timeouts apply. Usage errors and
    ``--help`` (argparse's ``SystemExit``) are results too.

    The command starts with Python's own SIGINT handler, as in a fresh process: asyncio
    installs its Ctrl-C handling only over that one, and a handler an earlier test's event
    loop left behind (asyncio's no-op, which hands the signal to that loop's descriptor)
    would swallow the Ctrl-C a test presses (``FakeCtlCluster.interrupt_in``): seen once in
    a full run, both cases of ``test_ctrl_c`` waiting out their deadlines."""
    left = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = main(list(argv))
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    finally:
        if left is not None:  # None: not set from Python; nothing to give back
            signal.signal(signal.SIGINT, left)
    out, err = capsys.readouterr()
    return MainResult(code, out, err)
