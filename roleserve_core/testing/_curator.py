"""A fake curator: a real gRPC server with mutual TLS, in the test's process, that records
every call a node makes and answers as the test says.

::

    test ──lead() / follow(other) / set_node() / remove_node()──▶ FakeCurator ◀── node's
         ──refuse(method) / hold_heartbeats() / end_streams()──▶     (gRPC, mTLS,   channel
         ◀──await wait_calls("UpdateNodeStatus", 2)──────────── 127.X.Y.Z:7835)

It serves what a node's core calls on a curator: ``Curator.Watch``, ``UpdateNodeStatus``,
``UpdateNodeClusterNetworking`` and ``Heartbeat`` (as the leader does) and
``CuratorLocal.GetCurrentLeader`` (as every curator does). Each fake is a node of the
cluster of its own, on a loopback address of its own at the standard port, so tests run in
parallel and again without meeting. Its answers follow the real curator's: a Watch sends
a snapshot whose last event is marked ``PROGRESS_LAST_BACKLOGGED``, then one event per
change; GetCurrentLeader names the leader and then every change of it; a heartbeat is
answered with the interval to keep; a status report replaces the status of the node's
record, and a clusternet update its ``clusternet``, if the test gave it one
(``set_node``). ``RenewCertificate`` issues a new certificate for the caller's key, valid
for ``certificate_lifetime``, when the fake knows the CA's key (``FakeCluster.curator``
gives it); a test refuses it (``refuse``) to see the node retry.

What it records, ``calls``, is a ``Value`` of every call so far (a heartbeat counts once
per message), so a test waits for the calls it expects and compares the whole sequence.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio
import grpc
from google.protobuf.message import Message
from typing_extensions import override

from roleserve_core.event import Value
from roleserve_core.identity import (
    NodeCredentials,
    PrivateKey,
    PublicKey,
    certificate_from_pem,
    certificate_to_pem,
    issue_node_certificate,
)
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.proto import curator_pb2, curator_pb2_grpc
from roleserve_core.rpc import NodePeer, bind, create_server, current_peer
from roleserve_core.testing._wait import DEFAULT_TIMEOUT, wait_for_value

__all__ = ["FakeCall", "FakeCurator", "random_loopback"]

Context = Any
"""``grpc.aio.ServicerContext``; generic in the stubs only."""

BIND_ATTEMPTS = 5
"""Random addresses a fake tries before it gives up (another test may hold one)."""


def random_loopback() -> ipaddress.IPv4Address:
    """127.X.Y.Z of the caller's own: parallel and repeated runs do not meet on a port."""
    octets = (random.randrange(1, 255), random.randrange(256), random.randrange(1, 255))
    return ipaddress.IPv4Address("127.{}.{}.{}".format(*octets))


@dataclass(frozen=True, slots=True)
class FakeCall:
    """One call (or one heartbeat message) a fake curator received."""

    method: str
    """``Watch``, ``UpdateNodeStatus``, ``Heartbeat`` or ``GetCurrentLeader``."""
    caller: str | None
    """The calling node's ID; None for a caller without a node certificate."""
    request: Message
    at: float
    """``anyio.current_time()`` when it arrived."""


class FakeCurator(curator_pb2_grpc.CuratorServicer, curator_pb2_grpc.CuratorLocalServicer):
    """A curator that records calls and answers as told; see the module docstring.

    Use it as an async context manager: it serves inside the block. Until ``lead()`` or
    ``follow()``, it does not answer ``GetCurrentLeader`` at all (a curator that hangs).

    :param credentials: its node credentials in the cluster under test.
    :param address: where it listens (port 7835); a random loopback address by default.
    :param heartbeat_interval: the interval its heartbeat replies name.
    :param ca_key: the cluster CA's key, to renew certificates with (UNIMPLEMENTED without).
    :param certificate_lifetime: how long the certificates it renews are valid.
    """

    def __init__(
        self,
        credentials: NodeCredentials,
        *,
        address: ipaddress.IPv4Address | None = None,
        heartbeat_interval: float = 5.0,
        ca_key: PrivateKey | None = None,
        certificate_lifetime: datetime.timedelta = datetime.timedelta(days=30),
    ) -> None:
        self.credentials = credentials
        self.ca_key = ca_key
        self.certificate_lifetime = certificate_lifetime
        self.address = address or random_loopback()
        self._fixed_address = address is not None
        self.heartbeat_interval = heartbeat_interval
        self.calls: Value[tuple[FakeCall, ...]] = Value()
        self.calls.set(())
        self.heartbeat_replies: Value[int] = Value()
        """How many heartbeat replies it has sent (counted as each is sent)."""
        self.heartbeat_replies.set(0)
        self.leader_answers: Value[int] = Value()
        """How many GetCurrentLeader answers it has sent, over all its streams (counted as
        each is sent; the answers of one stream reach the caller in order)."""
        self.leader_answers.set(0)
        self.open_watches: Value[int] = Value()
        """How many Watch streams are open now (counted as each opens and ends)."""
        self.open_watches.set(0)
        self.revoked: Value[frozenset[int]] = Value()
        """The serials WatchRevokedCredentials sends: set it to revoke user certificates."""
        self.revoked.set(frozenset())
        self._leader: curator_pb2.GetCurrentLeaderResponse | None = None
        self._nodes: dict[str, tuple[int, curator_pb2.Node]] = {}
        self._version = 0
        self._refusals: dict[str, tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]] = {}
        self._ended: dict[str, int] = {}
        self._answering = True
        self._changes: Value[int] = Value()
        self._changes.set(0)
        self._server: grpc.aio.Server | None = None

    # -- identity ---------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        """Its node ID: what a channel to it verifies."""
        return self.credentials.node_id

    @property
    def endpoint(self) -> str:
        """``host:port`` it serves at."""
        return endpoint(self.address, CURATOR_PORT)

    def __repr__(self) -> str:
        return f"FakeCurator({self.node_id} at {self.endpoint})"

    # -- what the test tells it -------------------------------------------------------

    def lead(self) -> None:
        """Answer GetCurrentLeader with itself as the leader."""
        self.follow(self)

    def follow(self, leader: FakeCurator | None, *, host: str | None = None) -> None:
        """Answer GetCurrentLeader naming ``leader`` (None: "no leader yet", an election).

        :param host: the leader's host to name; its address by default ("": none, so the
            client uses the address it asked).
        """
        if leader is None:
            self._leader = curator_pb2.GetCurrentLeaderResponse(this_node_id=self.node_id)
        else:
            self._leader = curator_pb2.GetCurrentLeaderResponse(
                leader_node_id=leader.node_id,
                leader_host=str(leader.address) if host is None else host,
                leader_port=CURATOR_PORT,
                this_node_id=self.node_id,
            )
        self._changed()

    def without_quorum(self, quorum: curator_pb2.NoQuorum) -> None:
        """Answer GetCurrentLeader as a curator whose consensus has no quorum: no leader,
        and ``quorum``, the members and which of them answer."""
        self._leader = curator_pb2.GetCurrentLeaderResponse(
            this_node_id=self.node_id, no_quorum=quorum
        )
        self._changed()

    def set_node(self, node: curator_pb2.Node) -> None:
        """Add or replace a node of the cluster; watches of it get an event."""
        self._version += 1
        copy = curator_pb2.Node()
        copy.CopyFrom(node)
        self._nodes[node.id] = (self._version, copy)
        self._changed()

    def remove_node(self, node_id: str) -> None:
        """Remove a node; watches of it get a tombstone."""
        del self._nodes[node_id]
        self._changed()

    def refuse(
        self,
        method: str,
        code: grpc.StatusCode,
        details: str,
        *,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Refuse every later call of ``method`` with ``code``, until ``allow``.

        :param metadata: the refusal's trailing metadata (``rpc.LEADER_STARTING_METADATA``:
            as a curator just elected refuses).
        """
        self._refusals[method] = (code, details, metadata)

    def allow(self, method: str) -> None:
        """Stop refusing ``method``."""
        self._refusals.pop(method, None)

    def end_streams(self, method: str) -> None:
        """End the open streams of ``method`` as a server ends them: status OK.

        ``Watch`` and ``GetCurrentLeader`` streams end at once; a ``Heartbeat`` stream at
        the next heartbeat, which gets no answer. Later calls are served as before.
        """
        self._ended[method] = self._ended.get(method, 0) + 1
        self._changed()

    def hold_heartbeats(self) -> None:
        """Answer no heartbeat that arrives from now on, until ``answer_heartbeats``.

        Those that arrived before are answered: when ``requests("Heartbeat")`` holds N
        beats at this call, the fake answers exactly N (``heartbeat_replies``).
        """
        self._answering = False
        self._changed()

    def answer_heartbeats(self) -> None:
        """Answer heartbeats again, the held ones first."""
        self._answering = True
        self._changed()

    # -- what the test reads ----------------------------------------------------------

    def requests(self, method: str) -> list[Any]:
        """The requests of ``method`` so far, in order."""
        return [call.request for call in self.calls.get_nowait() if call.method == method]

    async def wait_calls(
        self, method: str, count: int, *, timeout: float = DEFAULT_TIMEOUT
    ) -> list[FakeCall]:
        """Wait until ``method`` was called at least ``count`` times; every such call."""
        calls = await wait_for_value(
            self.calls,
            lambda calls: sum(call.method == method for call in calls) >= count,
            timeout=timeout,
        )
        return [call for call in calls if call.method == method]

    # -- serving ----------------------------------------------------------------------

    async def __aenter__(self) -> FakeCurator:
        server = create_server(self.credentials)
        curator_pb2_grpc.add_CuratorServicer_to_server(self, server)
        curator_pb2_grpc.add_CuratorLocalServicer_to_server(self, server)
        for attempt in range(BIND_ATTEMPTS):
            try:
                bind(server, self.endpoint, self.credentials)
                break
            except OSError:
                if self._fixed_address or attempt == BIND_ATTEMPTS - 1:
                    raise
                self.address = random_loopback()
        await server.start()
        self._server = server
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop serving: open calls end with UNAVAILABLE or CANCELLED, new ones fail."""
        server, self._server = self._server, None
        if server is not None:
            with anyio.CancelScope(shield=True):
                await server.stop(None)

    # -- the services -----------------------------------------------------------------

    def _changed(self) -> None:
        self._changes.set(self._changes.get_nowait() + 1)

    def _ended_since(self, method: str, generation: int) -> bool:
        return self._ended.get(method, 0) != generation

    async def _admit(self, method: str, request: Message, context: Context) -> None:
        """Record the call; abort it if the test said to refuse ``method``."""
        self._record(method, request)
        await self._refuse_if_told(method, context)

    async def _refuse_if_told(self, method: str, context: Context) -> None:
        refusal = self._refusals.get(method)
        if refusal is not None:
            await context.abort(*refusal)

    def _record(self, method: str, request: Message) -> None:
        peer = current_peer()
        caller = peer.node_id if isinstance(peer, NodePeer) else None
        copy = type(request)()
        copy.CopyFrom(request)
        call = FakeCall(method, caller, copy, anyio.current_time())
        self.calls.set((*self.calls.get_nowait(), call))

    @override
    async def UpdateNodeStatus(
        self, request: curator_pb2.UpdateNodeStatusRequest, context: Context
    ) -> curator_pb2.UpdateNodeStatusResponse:
        await self._admit("UpdateNodeStatus", request, context)
        # As the curator does: the record's status is replaced.
        self._replace_part(request.node_id, lambda node: node.status.CopyFrom(request.status))
        return curator_pb2.UpdateNodeStatusResponse()

    @override
    async def Watch(
        self, request: curator_pb2.WatchRequest, context: Context
    ) -> AsyncIterator[curator_pb2.WatchEvent]:
        await self._admit("Watch", request, context)
        only = (
            request.node_in_cluster.node_id
            if request.WhichOneof("kind") == "node_in_cluster"
            else None
        )
        generation = self._ended.get("Watch", 0)
        backlogged = False
        self.open_watches.set(self.open_watches.get_nowait() + 1)
        try:
            async with contextlib.aclosing(self._watch_events(only, generation)) as events:
                async for event in events:
                    if not backlogged:
                        event.progress = curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED
                        backlogged = True
                    elif not event.nodes and not event.node_tombstones:
                        continue
                    yield event
        finally:
            self.open_watches.set(self.open_watches.get_nowait() - 1)

    async def _watch_events(
        self, only: str | None, generation: int
    ) -> AsyncGenerator[curator_pb2.WatchEvent]:
        """Each catch-up event of one Watch stream, until the test ends Watch streams."""
        sent: dict[str, int] = {}
        with self._changes.watch() as changes:
            while True:
                await changes.get()
                if self._ended_since("Watch", generation):
                    return
                nodes = {key: entry for key, entry in self._nodes.items() if only in (None, key)}
                yield _catch_up(sent, nodes)

    @override
    async def WatchRevokedCredentials(
        self, request: curator_pb2.WatchRevokedCredentialsRequest, context: Context
    ) -> AsyncIterator[curator_pb2.RevokedCredentials]:
        await self._admit("WatchRevokedCredentials", request, context)
        with self.revoked.watch() as revoked:
            while True:
                serials = await revoked.get()
                yield curator_pb2.RevokedCredentials(serials=[f"{s:x}" for s in sorted(serials)])

    @override
    async def Heartbeat(
        self, request_iterator: Any, context: Context
    ) -> AsyncIterator[curator_pb2.HeartbeatResponse]:
        await self._refuse_if_told("Heartbeat", context)
        generation = self._ended.get("Heartbeat", 0)
        async for request in request_iterator:
            self._record("Heartbeat", request)
            if not self._answering:  # decided on arrival: held from hold_heartbeats() on
                with self._changes.watch() as changes:
                    await changes.get(
                        filter=lambda _: (
                            self._answering or self._ended_since("Heartbeat", generation)
                        )
                    )
            if self._ended_since("Heartbeat", generation):
                return
            response = curator_pb2.HeartbeatResponse()
            response.interval.FromNanoseconds(int(self.heartbeat_interval * 1e9))
            self.heartbeat_replies.set(self.heartbeat_replies.get_nowait() + 1)
            yield response

    @override
    async def GetCurrentLeader(
        self, request: curator_pb2.GetCurrentLeaderRequest, context: Context
    ) -> AsyncIterator[curator_pb2.GetCurrentLeaderResponse]:
        await self._admit("GetCurrentLeader", request, context)
        generation = self._ended.get("GetCurrentLeader", 0)
        sent: curator_pb2.GetCurrentLeaderResponse | None = None
        with self._changes.watch() as changes:
            while True:
                await changes.get()
                if self._ended_since("GetCurrentLeader", generation):
                    return
                if self._leader is not None and self._leader != sent:
                    sent = self._leader
                    self.leader_answers.set(self.leader_answers.get_nowait() + 1)
                    yield sent

    @override
    async def GetCACertificate(
        self, request: curator_pb2.GetCACertificateRequest, context: Context
    ) -> curator_pb2.GetCACertificateResponse:
        await self._admit("GetCACertificate", request, context)
        ca = certificate_to_pem(self.credentials.ca_certificate)
        return curator_pb2.GetCACertificateResponse(ca_certificate=ca)

    @override
    async def RenewCertificate(
        self, request: curator_pb2.RenewCertificateRequest, context: Context
    ) -> curator_pb2.RenewCertificateResponse:
        if self.ca_key is None:
            return await self._unimplemented("RenewCertificate", request, context)
        await self._admit("RenewCertificate", request, context)
        pem = context.auth_context()["x509_pem_cert"][0]
        key = certificate_from_pem(pem, "the caller's certificate").public_key()
        assert isinstance(key, PublicKey)  # the server admits P-256 node certificates only
        now = datetime.datetime.now(datetime.UTC)
        certificate = issue_node_certificate(
            self.ca_key,
            self.credentials.ca_certificate,
            key,
            not_after=now + self.certificate_lifetime,
        )
        return curator_pb2.RenewCertificateResponse(
            node_certificate=certificate_to_pem(certificate)
        )

    # What a node's core does not call on a running cluster: enrolment has tests of its own
    # against the real curator.

    @override
    async def RegisterNode(
        self, request: curator_pb2.RegisterNodeRequest, context: Context
    ) -> curator_pb2.RegisterNodeResponse:
        return await self._unimplemented("RegisterNode", request, context)

    @override
    async def CommitNode(
        self, request: curator_pb2.CommitNodeRequest, context: Context
    ) -> curator_pb2.CommitNodeResponse:
        return await self._unimplemented("CommitNode", request, context)

    @override
    async def JoinNode(
        self, request: curator_pb2.JoinNodeRequest, context: Context
    ) -> curator_pb2.JoinNodeResponse:
        return await self._unimplemented("JoinNode", request, context)

    @override
    async def UpdateNodeClusterNetworking(
        self, request: curator_pb2.UpdateNodeClusterNetworkingRequest, context: Context
    ) -> curator_pb2.UpdateNodeClusterNetworkingResponse:
        await self._admit("UpdateNodeClusterNetworking", request, context)
        # As the curator does: the caller's clusternet is replaced.
        peer = current_peer()
        if isinstance(peer, NodePeer):
            clusternet = request.clusternet
            self._replace_part(peer.node_id, lambda node: node.clusternet.CopyFrom(clusternet))
        return curator_pb2.UpdateNodeClusterNetworkingResponse()

    def _replace_part(self, node_id: str, replace: Callable[[curator_pb2.Node], None]) -> None:
        """A new version of ``node_id``'s record (if it has one) with ``replace`` applied
        to a copy: what the curator's update calls do to the caller's record."""
        known = self._nodes.get(node_id)
        if known is not None:
            node = curator_pb2.Node()
            node.CopyFrom(known[1])
            replace(node)
            self.set_node(node)

    async def _unimplemented(self, method: str, request: Message, context: Context) -> NoReturn:
        self._record(method, request)
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"the fake curator has no {method}")
        raise AssertionError("abort returned")  # pragma: no cover - abort always raises


def _catch_up(
    sent: dict[str, int], nodes: Mapping[str, tuple[int, curator_pb2.Node]]
) -> curator_pb2.WatchEvent:
    """The event that brings a watcher that has seen ``sent`` (ID → version) up to
    ``nodes``; updates ``sent``."""
    event = curator_pb2.WatchEvent()
    for node_id, (version, node) in sorted(nodes.items()):
        if sent.get(node_id) != version:
            event.nodes.append(node)
            sent[node_id] = version
    for node_id in sorted(set(sent) - set(nodes)):
        event.node_tombstones.add(node_id=node_id)
        del sent[node_id]
    return event
