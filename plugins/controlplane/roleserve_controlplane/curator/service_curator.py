"""The node-facing ``Curator`` service, served by the leader.

::

    Watch                    from the node cache: snapshot, marker, then coalesced changes
    UpdateNodeStatus         the caller's own node only; replaces the status, stamps the time;
                             refused from another process than the heartbeat stream's
    Heartbeat                the caller's own node; answers with the interval to keep; one
                             live stream per node: a second process's is refused
    RegisterNode             ticket (constant time) + ephemeral key → node NEW
    CommitNode               approved (STANDBY) → node certificate, UP; repeatable when UP
    JoinNode                 join key (ephemeral key) → the node, which must be UP
    UpdateNodeClusterNetworking  the caller's own WireGuard key and prefixes (its own
                             address, inside its allocated prefix, or inside the cluster
                             network and clear of other nodes' allocated prefixes)
    RenewCertificate         the caller's own node, UP: a new certificate for its stored key,
                             valid for the configured lifetime, kept in its record
    WatchRevokedCredentials  the revoked user serials: all at once, then again at each
                             change (credentials.py), for the nodes' management servers

Node certificates are issued for the cluster configuration's ``node_certificate_lifetime``
(``authority.node_certificate_lifetime``). A decommissioned node never reaches
RenewCertificate (the node gate refuses it, like every node-authenticated method); the
check of the state here covers a record that changes between the gate and the write.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc
from typing_extensions import override

from roleserve_controlplane.curator.authority import node_certificate_lifetime
from roleserve_controlplane.curator.cache import NodeCache
from roleserve_controlplane.curator.credentials import serial_text
from roleserve_controlplane.curator.errors import RefusedError, handled
from roleserve_controlplane.curator.health import Connection
from roleserve_controlplane.curator.leader import LeaderState, now_timestamp
from roleserve_controlplane.curator.state import NodeNotFoundError
from roleserve_controlplane.curator.validation import (
    check_clusternet,
    check_instance,
    check_labels,
    check_node_id,
    check_status,
)
from roleserve_controlplane.curator.watchevents import CHUNK_BYTES, WatchEncoder, encoded
from roleserve_controlplane.proto import state_pb2
from roleserve_core import IdentityError, common_pb2, curator_pb2, curator_pb2_grpc
from roleserve_core.identity import (
    PublicKey,
    certificate_to_pem,
    node_id,
    public_key_der,
    public_key_from_der,
)
from roleserve_core.limits import MAX_KEY_BYTES, MAX_TICKET_BYTES, check_bytes
from roleserve_core.rpc import NodePeer, UnauthenticatedPeer, current_peer

__all__ = ["CHUNK_BYTES", "CuratorService", "add_to_server"]

Context = Any
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def _calling_node() -> str:
    """The node ID of the caller, which must be a node."""
    peer = current_peer()
    if not isinstance(peer, NodePeer):
        raise RefusedError(grpc.StatusCode.PERMISSION_DENIED, "only nodes may call this")
    return peer.node_id


def _ephemeral_key() -> PublicKey:
    """The key the caller's ephemeral certificate proves it holds."""
    peer = current_peer()
    if not isinstance(peer, UnauthenticatedPeer) or peer.public_key is None:
        raise RefusedError(
            grpc.StatusCode.UNAUTHENTICATED,
            "call this with the ephemeral certificate of the key to enrol",
        )
    return peer.public_key


def _connection(context: Context, instance: str) -> Connection:
    """The calling process: its peer address (without ``ipv4:``) and its instance ID."""
    peer = str(context.peer())
    kind, _, address = peer.partition(":")
    return Connection(address if kind in ("ipv4", "ipv6") else peer, instance)


def _identity_conflict(node: str, holder: Connection) -> RefusedError:
    return RefusedError(
        grpc.StatusCode.ALREADY_EXISTS,
        f"node {node} is already connected from {holder.peer}; two processes share its "
        "identity (a copied data directory?)",
    )


class CuratorService(curator_pb2_grpc.CuratorServicer):
    """The leader's ``Curator`` service."""

    def __init__(self, leader: LeaderState) -> None:
        self.leader = leader
        self.events = WatchEncoder(leader.cache)
        """Watch events, encoded once for every stream (sent by ``add_to_server``)."""
        self.open_watches = 0
        """``Watch`` streams open now (for metrics)."""

    # -- watching -------------------------------------------------------------------

    @override
    @handled
    async def Watch(  # type: ignore[override]  # events encoded: see add_to_server
        self, request: curator_pb2.WatchRequest, context: Context
    ) -> AsyncIterator[bytes]:
        cache = self.leader.cache
        await cache.ready.wait()
        kind = request.WhichOneof("kind")
        if kind == "node_in_cluster":
            wanted: str | None = check_node_id(request.node_in_cluster.node_id)
        elif kind == "nodes_in_cluster":
            wanted = None
        else:
            raise RefusedError(grpc.StatusCode.INVALID_ARGUMENT, "say which nodes to watch")
        self.open_watches += 1
        try:
            async for event in self._watch(cache, wanted):
                yield event
        finally:
            self.open_watches -= 1

    async def _watch(self, cache: NodeCache, wanted: str | None) -> AsyncIterator[bytes]:
        """The snapshot, then each batch of changes, as encoded events (``watchevents``)."""
        peer = current_peer()
        owner = peer.node_id if isinstance(peer, NodePeer) else None
        with cache.subscribe(wanted, owner=owner) as subscription:
            # Taken in the same step as the subscription: no change falls between them.
            snapshot = self.events.snapshot(wanted)
            for event in snapshot:
                yield event
            while True:
                yield self.events.change(await subscription.next_batch())

    # -- reports from nodes ---------------------------------------------------------

    @override
    @handled
    async def UpdateNodeStatus(
        self, request: curator_pb2.UpdateNodeStatusRequest, context: Context
    ) -> curator_pb2.UpdateNodeStatusResponse:
        caller = _calling_node()
        if check_node_id(request.node_id) != caller:
            raise RefusedError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"node {caller} may update only its own status, not {request.node_id}'s",
            )
        if not request.HasField("status"):
            raise RefusedError(grpc.StatusCode.INVALID_ARGUMENT, "the status is missing")
        check_status(request.status)
        check_instance(request.instance)
        holder = self.leader.heartbeats.refuse_other(caller, _connection(context, request.instance))
        if holder is not None:
            raise _identity_conflict(caller, holder)

        def replace(record: state_pb2.NodeRecord) -> None:
            record.status.CopyFrom(request.status)
            record.status.timestamp.CopyFrom(now_timestamp())

        await self.leader.state.update_node(caller, replace)
        return curator_pb2.UpdateNodeStatusResponse()

    @override
    @handled
    async def Heartbeat(
        self, request_iterator: AsyncIterator[curator_pb2.HeartbeatRequest], context: Context
    ) -> AsyncIterator[curator_pb2.HeartbeatResponse]:
        caller = _calling_node()
        # The cache loads just after the election: a node beating to a new leader at once
        # must not be told that it does not exist.
        await self.leader.cache.ready.wait()
        if self.leader.cache.get(caller) is None:
            raise NodeNotFoundError(f"no node {caller}")
        heartbeats = self.leader.heartbeats
        # One answer for every beat of the stream (the interval is the leader's for good):
        # built per beat, it cost a message and a Duration normalised in Python each time.
        response = curator_pb2.HeartbeatResponse()
        response.interval.FromNanoseconds(int(heartbeats.interval * 1e9))
        connection: Connection | None = None
        try:
            async for request in request_iterator:
                if connection is None:  # the first beat says which process this is
                    connection = _connection(context, check_instance(request.instance))
                    holder = heartbeats.connect(caller, connection)
                    if holder is not None:
                        connection = None
                        raise _identity_conflict(caller, holder)
                heartbeats.beat(caller)
                yield response
        finally:
            if connection is not None:
                heartbeats.disconnect(caller, connection)

    @override
    @handled
    async def UpdateNodeClusterNetworking(
        self, request: curator_pb2.UpdateNodeClusterNetworkingRequest, context: Context
    ) -> curator_pb2.UpdateNodeClusterNetworkingResponse:
        caller = _calling_node()
        await self.leader.cache.ready.wait()  # the other nodes' keys come from the cache
        # The caller's own record from etcd, not from the cache: the status it has just
        # reported may not have reached the cache yet.
        stored = await self.leader.state.node(caller)
        if stored is None:
            raise NodeNotFoundError(f"no node {caller}")
        own = stored.record
        if not own.status.external_address:
            raise RefusedError(
                grpc.StatusCode.FAILED_PRECONDITION, "report a status before cluster networking"
            )
        others = {
            record.clusternet.wireguard_pubkey
            for record in self.leader.cache.nodes.values()
            if record.id != caller and record.clusternet.wireguard_pubkey
        }
        allocated = {
            record.cluster_prefix: record.id
            for record in self.leader.cache.nodes.values()
            if record.id != caller and record.cluster_prefix
        }
        check_clusternet(
            request.clusternet,
            own.status.external_address,
            others,
            network=self.leader.network.network,
            own_prefix=own.cluster_prefix,
            allocated=allocated,
        )

        def replace(record: state_pb2.NodeRecord) -> None:
            record.clusternet.CopyFrom(request.clusternet)

        await self.leader.state.update_node(caller, replace)
        return curator_pb2.UpdateNodeClusterNetworkingResponse()

    # -- enrolment ------------------------------------------------------------------

    @override
    @handled
    async def RegisterNode(
        self, request: curator_pb2.RegisterNodeRequest, context: Context
    ) -> curator_pb2.RegisterNodeResponse:
        key = _ephemeral_key()
        check_bytes("register_ticket", request.register_ticket, MAX_TICKET_BYTES)
        check_bytes("join_key", request.join_key, MAX_KEY_BYTES)
        ticket = await self.leader.state.ticket()
        if not ticket or not hmac.compare_digest(request.register_ticket, ticket):
            raise RefusedError(grpc.StatusCode.PERMISSION_DENIED, "wrong register ticket")
        try:
            join_key = public_key_der(public_key_from_der(request.join_key))
        except IdentityError as exc:
            raise RefusedError(grpc.StatusCode.INVALID_ARGUMENT, f"join_key: {exc}") from None
        check_labels(request.labels)
        record = state_pb2.NodeRecord(
            id=node_id(key),
            public_key=public_key_der(key),
            state=common_pb2.NODE_STATE_NEW,
            labels=request.labels,
            join_key=join_key,
        )
        if not await self.leader.state.create_node(record):
            stored = await self.leader.state.node(record.id)
            if stored is None:  # the join key is taken: JoinNode would name the other node
                raise RefusedError(
                    grpc.StatusCode.ALREADY_EXISTS, "another node registered this join key"
                )
            if stored.record.state != common_pb2.NODE_STATE_NEW:
                raise RefusedError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"node {record.id} is already registered and past NEW",
                )
        return curator_pb2.RegisterNodeResponse(node_id=record.id)

    @override
    @handled
    async def CommitNode(
        self, request: curator_pb2.CommitNodeRequest, context: Context
    ) -> curator_pb2.CommitNodeResponse:
        key = _ephemeral_key()
        identity = node_id(key)
        authority = self.leader.authority
        lifetime = node_certificate_lifetime(await self.leader.state.configuration())

        def commit(record: state_pb2.NodeRecord) -> None:
            if record.state == common_pb2.NODE_STATE_NEW:
                raise RefusedError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"node {identity} is not approved yet; wait for an operator to approve it",
                )
            if record.state == common_pb2.NODE_STATE_DECOMMISSIONED:
                raise RefusedError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"node {identity} is decommissioned"
                )
            if record.state == common_pb2.NODE_STATE_STANDBY or not record.certificate:
                record.certificate = certificate_to_pem(authority.node_certificate(key, lifetime))
                record.state = common_pb2.NODE_STATE_UP

        # An UP node gets its certificate again: a commit whose answer was lost can be
        # repeated, where Monogon's node would need an operator to reset it.
        record = await self.leader.state.update_node(identity, commit)
        return curator_pb2.CommitNodeResponse(
            ca_certificate=authority.ca_pem, node_certificate=record.certificate
        )

    @override
    @handled
    async def RenewCertificate(
        self, request: curator_pb2.RenewCertificateRequest, context: Context
    ) -> curator_pb2.RenewCertificateResponse:
        caller = _calling_node()
        authority = self.leader.authority
        lifetime = node_certificate_lifetime(await self.leader.state.configuration())

        def renew(record: state_pb2.NodeRecord) -> None:
            if record.state != common_pb2.NODE_STATE_UP:
                state = common_pb2.NodeState.Name(record.state)
                raise RefusedError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"node {caller} is {state}: only UP nodes renew their certificate",
                )
            key = public_key_from_der(record.public_key)
            record.certificate = certificate_to_pem(authority.node_certificate(key, lifetime))

        # Kept in the record, so that a repeated CommitNode hands out the latest one.
        record = await self.leader.state.update_node(caller, renew)
        return curator_pb2.RenewCertificateResponse(node_certificate=record.certificate)

    @override
    @handled
    async def JoinNode(
        self, request: curator_pb2.JoinNodeRequest, context: Context
    ) -> curator_pb2.JoinNodeResponse:
        join_key = public_key_der(_ephemeral_key())
        identity = await self.leader.state.node_of_join_key(join_key)
        stored = await self.leader.state.node(identity) if identity else None
        if stored is None:
            raise RefusedError(grpc.StatusCode.PERMISSION_DENIED, "unknown join key")
        if stored.record.state != common_pb2.NODE_STATE_UP:
            raise RefusedError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"node {stored.record.id} is {common_pb2.NodeState.Name(stored.record.state)}",
            )
        return curator_pb2.JoinNodeResponse(node_id=stored.record.id, state=stored.record.state)

    @override
    @handled
    async def WatchRevokedCredentials(
        self, request: curator_pb2.WatchRevokedCredentialsRequest, context: Context
    ) -> AsyncIterator[curator_pb2.RevokedCredentials]:
        revoked = self.leader.revoked
        await revoked.ready.wait()
        serials = revoked.serials
        while True:
            yield curator_pb2.RevokedCredentials(serials=sorted(map(serial_text, serials)))
            serials = await revoked.wait_changed(serials)


class _Registration:
    """What the generated ``add_CuratorServicer_to_server`` registers, kept to be changed."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, Handler] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        """Built again by ``add_to_server`` from ``handlers``."""

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Handler]) -> None:
        self.service, self.handlers = service, dict(handlers)


def add_to_server(service: CuratorService, server: grpc.aio.Server) -> None:
    """Serve ``service`` on ``server``, as the generated code does, except that Watch sends
    the events it yields already encoded (``watchevents.encoded``)."""
    registration = _Registration()
    curator_pb2_grpc.add_CuratorServicer_to_server(service, registration)  # type: ignore[arg-type]
    handlers = registration.handlers
    handlers["Watch"] = grpc.unary_stream_rpc_method_handler(
        service.Watch,
        request_deserializer=curator_pb2.WatchRequest.FromString,
        response_serializer=encoded,
    )
    generic = grpc.method_handlers_generic_handler(registration.service, handlers)
    server.add_generic_rpc_handlers((generic,))
    server.add_registered_method_handlers(registration.service, handlers)
