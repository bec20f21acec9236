"""Mutual TLS and authorization over a real grpc.aio server on loopback.

The matrix of the wire-API issue: who may call what, and who the handler sees. A call the
TLS handshake refuses ends in UNAVAILABLE (the connection never comes up); a call the
interceptor refuses ends in the status it chose.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2
from typing_extensions import override

from roleserve_core.identity import (
    Credentials,
    EphemeralCredentials,
    NodeCredentials,
    generate_key,
    issue_node_certificate,
    issue_user_certificate,
    node_id,
)
from roleserve_core.limits import MAX_READ_BYTES, MAX_REQUEST_BYTES
from roleserve_core.proto import (
    curator_pb2,
    curator_pb2_grpc,
    generate,
    management_pb2,
    management_pb2_grpc,
    nodemanagement_pb2,
)
from roleserve_core.rpc import (
    FLOW_CONTROL_OPTIONS,
    KEEPALIVE_OPTIONS,
    KEEPALIVE_POLICY,
    NODE_PERMISSIONS,
    RECONNECT_OPTIONS,
    REQUEST_LIMITS,
    USER_PERMISSIONS,
    NodePeer,
    Peer,
    UnauthenticatedPeer,
    UserPeer,
    bind,
    create_server,
    current_peer,
    method_authorization,
    secure_channel,
)
from roleserve_core.testing import ThrowawayCA

pytestmark = pytest.mark.anyio

CALL_TIMEOUT = 10.0
"""Generous: a refused handshake fails the call at once, well within it."""

UNANNOTATED_SERVICE = "roleserve.test.Unannotated"


class CA(ThrowawayCA):
    """The kit's throwaway cluster CA, issuing credentials outside their validity too."""

    def unchecked(self, node: bool, **validity: datetime.datetime) -> NodeCredentials:
        """Credentials outside their validity, which the checked classes refuse to hold."""
        key = generate_key()
        if node:
            cert = issue_node_certificate(self.key, self.certificate, key.public_key(), **validity)
        else:
            cert = issue_user_certificate(
                self.key,
                self.certificate,
                key.public_key(),
                "owner",
                not_before=validity.get("not_before"),
                not_after=validity.get("not_after"),
            )
        return cast(NodeCredentials, Credentials(key, cert, self.certificate))


class Recorder:
    """Handlers that record the peer they saw and answer with what a test can check."""

    def __init__(self) -> None:
        self.peers: list[Peer] = []

    def saw(self) -> Peer:
        peer = current_peer()
        self.peers.append(peer)
        return peer


# The test servicers implement only what the tests call; the generated base classes answer
# UNIMPLEMENTED for the rest, but their stubs declare every method abstract.


class Curator(curator_pb2_grpc.CuratorServicer):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    @override
    async def UpdateNodeStatus(
        self, request: curator_pb2.UpdateNodeStatusRequest, context: Any
    ) -> curator_pb2.UpdateNodeStatusResponse:
        self.recorder.saw()
        return curator_pb2.UpdateNodeStatusResponse()

    @override
    async def RegisterNode(
        self, request: curator_pb2.RegisterNodeRequest, context: Any
    ) -> curator_pb2.RegisterNodeResponse:
        peer = self.recorder.saw()
        key = peer.public_key if isinstance(peer, UnauthenticatedPeer) else None
        return curator_pb2.RegisterNodeResponse(node_id=node_id(key) if key else "")

    @override
    async def Watch(
        self, request: curator_pb2.WatchRequest, context: Any
    ) -> AsyncIterator[curator_pb2.WatchEvent]:
        peer = self.recorder.saw()
        assert isinstance(peer, NodePeer)
        for _ in range(3):
            yield curator_pb2.WatchEvent(nodes=[curator_pb2.Node(id=peer.node_id)])

    @override
    async def Heartbeat(
        self, request_iterator: AsyncIterator[curator_pb2.HeartbeatRequest], context: Any
    ) -> AsyncIterator[curator_pb2.HeartbeatResponse]:
        self.recorder.saw()
        async for _ in request_iterator:
            response = curator_pb2.HeartbeatResponse()
            response.interval.FromSeconds(5)
            yield response

    @override
    async def JoinNode(
        self, request: curator_pb2.JoinNodeRequest, context: Any
    ) -> curator_pb2.JoinNodeResponse:
        await anyio.sleep_forever()  # a call that only ends when the client gives up
        raise AssertionError("unreachable")


class Management(management_pb2_grpc.ManagementServicer):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    @override
    async def ApproveNode(
        self, request: management_pb2.ApproveNodeRequest, context: Any
    ) -> management_pb2.ApproveNodeResponse:
        self.recorder.saw()
        return management_pb2.ApproveNodeResponse()


def unannotated_method_registered() -> None:
    """Put a service whose method has no authorization option into the descriptor pool."""
    pool = descriptor_pool.Default()
    try:
        pool.FindServiceByName(UNANNOTATED_SERVICE)
        return
    except KeyError:
        pass
    empty_pb2.Empty()  # makes sure google/protobuf/empty.proto is in the pool
    proto = descriptor_pb2.FileDescriptorProto(
        name="roleserve_test_unannotated.proto",
        package="roleserve.test",
        dependency=["google/protobuf/empty.proto"],
    )
    service = proto.service.add(name="Unannotated")
    service.method.add(
        name="Ping", input_type=".google.protobuf.Empty", output_type=".google.protobuf.Empty"
    )
    pool.Add(proto)


async def ping(request: bytes, context: Any) -> bytes:
    return request


@dataclass
class Cluster:
    ca: CA
    server: NodeCredentials
    address: str
    recorder: Recorder


@pytest.fixture
def ca() -> CA:
    return CA()


@pytest.fixture
async def cluster(ca: CA) -> AsyncIterator[Cluster]:
    unannotated_method_registered()
    credentials = ca.node()
    recorder = Recorder()
    server = create_server(credentials)
    curator_pb2_grpc.add_CuratorServicer_to_server(Curator(recorder), server)  # type: ignore[abstract]
    management_pb2_grpc.add_ManagementServicer_to_server(Management(recorder), server)  # type: ignore[abstract]
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                UNANNOTATED_SERVICE, {"Ping": grpc.unary_unary_rpc_method_handler(ping)}
            ),
        )
    )
    port = bind(server, "127.0.0.1:0", credentials)
    await server.start()
    try:
        yield Cluster(ca, credentials, f"127.0.0.1:{port}", recorder)
    finally:
        await server.stop(None)


async def call(
    cluster: Cluster,
    credentials: Credentials,
    invoke: Callable[[grpc.aio.Channel], Awaitable[Any]],
    *,
    node: str | None = None,
) -> Any:
    async with secure_channel(cluster.address, credentials, node_id=node) as channel:
        return await invoke(channel)


def update_status(channel: grpc.aio.Channel, about: str = "") -> Awaitable[Any]:
    request = curator_pb2.UpdateNodeStatusRequest(node_id=about)
    return curator_pb2_grpc.CuratorStub(channel).UpdateNodeStatus(request, timeout=CALL_TIMEOUT)


def approve(channel: grpc.aio.Channel) -> Awaitable[Any]:
    request = management_pb2.ApproveNodeRequest(node_id="node-x")
    return management_pb2_grpc.ManagementStub(channel).ApproveNode(request, timeout=CALL_TIMEOUT)


def register(channel: grpc.aio.Channel) -> Awaitable[Any]:
    request = curator_pb2.RegisterNodeRequest(register_ticket=b"t")
    return curator_pb2_grpc.CuratorStub(channel).RegisterNode(request, timeout=CALL_TIMEOUT)


async def refused(awaitable: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await awaitable
    return caught.value.code(), caught.value.details() or ""


# -- the TLS layer --------------------------------------------------------------------------


async def test_no_client_certificate_is_refused(cluster: Cluster) -> None:
    tls = grpc.ssl_channel_credentials(root_certificates=cluster.server.ca_pem)
    options = [("grpc.ssl_target_name_override", cluster.server.node_id)]
    async with grpc.aio.secure_channel(cluster.address, tls, options) as channel:
        code, _ = await refused(register(channel))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert cluster.recorder.peers == []


async def test_certificate_of_a_foreign_ca_is_refused(cluster: Cluster) -> None:
    stranger = CA().user()
    # The stranger trusts our CA, so only the server's check can refuse it.
    credentials = Credentials(stranger.key, stranger.certificate, cluster.ca.certificate)
    code, _ = await refused(call(cluster, credentials, approve))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert cluster.recorder.peers == []


@pytest.mark.parametrize(
    "validity",
    [
        pytest.param(
            {"not_after": datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC)}, id="expired"
        ),
        pytest.param(
            {"not_before": datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)},
            id="not-yet-valid",
        ),
    ],
)
async def test_client_certificate_outside_its_validity_is_refused(
    cluster: Cluster, validity: dict[str, datetime.datetime]
) -> None:
    if "not_after" in validity:
        validity["not_before"] = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    owner = cluster.ca.unchecked(node=False, **validity)
    code, _ = await refused(call(cluster, owner, approve))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert cluster.recorder.peers == []


async def test_server_certificate_outside_its_validity_is_refused(ca: CA) -> None:
    expired = ca.unchecked(
        node=True,
        not_before=datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
        not_after=datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC),
    )
    server = create_server(expired)
    management_pb2_grpc.add_ManagementServicer_to_server(Management(Recorder()), server)  # type: ignore[abstract]
    port = bind(server, "127.0.0.1:0", expired)
    await server.start()
    try:
        target = Cluster(ca, expired, f"127.0.0.1:{port}", Recorder())
        code, _ = await refused(call(target, ca.user(), approve))
    finally:
        await server.stop(None)
    assert code is grpc.StatusCode.UNAVAILABLE


async def test_client_verifies_the_server_by_node_id(cluster: Cluster) -> None:
    owner = cluster.ca.user()
    await call(cluster, owner, approve, node=cluster.server.node_id)
    await call(cluster, owner, approve)  # any node of the cluster
    code, _ = await refused(call(cluster, owner, approve, node=cluster.ca.node().node_id))
    assert code is grpc.StatusCode.UNAVAILABLE
    serial = owner.certificate.serial_number
    assert cluster.recorder.peers == [UserPeer("owner", USER_PERMISSIONS, "owner", serial)] * 2


async def test_client_refuses_a_server_of_another_cluster(cluster: Cluster) -> None:
    """A client of another cluster (trusting only its own CA) never reaches the handler."""
    elsewhere = CA().user()
    code, _ = await refused(call(cluster, elsewhere, approve))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert cluster.recorder.peers == []


# -- the authorization layer ----------------------------------------------------------------


async def test_user_certificate_where_a_node_is_required(cluster: Cluster) -> None:
    code, details = await refused(call(cluster, cluster.ca.user(), update_status))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        "owner credentials cannot UpdateNodeStatus (needs UPDATE_NODE_SELF); only nodes may call it"
    )
    assert cluster.recorder.peers == []


async def test_node_certificate_where_a_user_is_required(cluster: Cluster) -> None:
    node = cluster.ca.node()
    code, details = await refused(call(cluster, node, approve))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        f"node {node.node_id} lacks MANAGE_NODES, needed by "
        "/roleserve.management.Management/ApproveNode"
    )
    assert cluster.recorder.peers == []


async def test_node_calling_about_another_node_is_seen_as_itself(cluster: Cluster) -> None:
    """The handler decides whether A may act for B; here, the peer it sees must be A."""
    node_a, node_b = cluster.ca.node(), cluster.ca.node()
    await call(cluster, node_a, lambda channel: update_status(channel, about=node_b.node_id))
    assert cluster.recorder.peers == [NodePeer(node_a.node_id, NODE_PERMISSIONS)]


async def test_ephemeral_certificate_on_an_unauthenticated_method(cluster: Cluster) -> None:
    key = generate_key()
    response = await call(
        cluster, EphemeralCredentials.for_key(key, cluster.ca.certificate), register
    )
    assert response.node_id == node_id(key.public_key())
    [peer] = cluster.recorder.peers
    assert isinstance(peer, UnauthenticatedPeer)
    assert peer.public_key is not None
    assert peer.public_key.public_numbers() == key.public_key().public_numbers()


async def test_ephemeral_certificate_on_an_authenticated_method(cluster: Cluster) -> None:
    ephemeral = EphemeralCredentials.for_key(generate_key(), cluster.ca.certificate)
    code, details = await refused(call(cluster, ephemeral, update_status))
    assert code is grpc.StatusCode.UNAUTHENTICATED
    assert "needs a node or user certificate of this cluster" in details
    assert cluster.recorder.peers == []


async def test_node_and_user_certificates_on_an_unauthenticated_method(cluster: Cluster) -> None:
    node, owner = cluster.ca.node(), cluster.ca.user()
    assert (await call(cluster, node, register)).node_id == ""
    assert (await call(cluster, owner, register)).node_id == ""
    assert cluster.recorder.peers == [
        NodePeer(node.node_id, NODE_PERMISSIONS),
        UserPeer("owner", USER_PERMISSIONS, "owner", owner.certificate.serial_number),
    ]


async def test_method_without_an_authorization_option_is_refused(cluster: Cluster) -> None:
    async def unannotated(channel: grpc.aio.Channel) -> Any:
        method: Any = channel.unary_unary(f"/{UNANNOTATED_SERVICE}/Ping")
        return await method(b"", timeout=CALL_TIMEOUT)

    code, details = await refused(call(cluster, cluster.ca.user(), unannotated))
    assert code is grpc.StatusCode.INTERNAL
    assert details == f"/{UNANNOTATED_SERVICE}/Ping declares no authorization; refused (fail safe)"


def test_every_method_of_the_api_declares_its_authorization() -> None:
    services = [
        curator_pb2.DESCRIPTOR.services_by_name["Curator"],
        curator_pb2.DESCRIPTOR.services_by_name["CuratorLocal"],
        management_pb2.DESCRIPTOR.services_by_name["Management"],
        nodemanagement_pb2.DESCRIPTOR.services_by_name["NodeManagement"],
    ]
    methods = [f"/{s.full_name}/{m.name}" for s in services for m in s.methods]
    assert len(methods) == 26
    assert [m for m in methods if method_authorization(m) is None] == []


@pytest.mark.parametrize(
    "proto",
    [proto for root in generate.roots()[1:] for proto in root.protos],
    ids=lambda proto: proto.name,
)
def test_every_method_of_a_plugins_proto_declares_its_authorization(proto: Path) -> None:
    """Plugins' services are served under the same interceptor (the curator's hook
    ``roleserve_curator_services``), which refuses a method without the option. Only our
    own packages (``roleserve.*``) are served: a proto of another system's API in its own
    package, for the wire to match (the kubernetes plugin's CRI, ``runtime.v1``), is only
    called."""
    root = next(root.root for root in generate.roots() if proto in root.protos)
    module = ".".join(proto.relative_to(root).with_suffix("").parts) + "_pb2"
    generated = pytest.importorskip(module)
    methods = [
        f"/{service.full_name}/{method.name}"
        for service in generated.DESCRIPTOR.services_by_name.values()
        if service.full_name.startswith("roleserve.")
        for method in service.methods
    ]
    assert [m for m in methods if method_authorization(m) is None] == []


# -- streams and cancellation ---------------------------------------------------------------


async def test_server_streaming_is_authorized(cluster: Cluster) -> None:
    node = cluster.ca.node()

    async def watch(channel: grpc.aio.Channel) -> list[str]:
        stub = curator_pb2_grpc.CuratorStub(channel)
        request = curator_pb2.WatchRequest(
            nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster()
        )
        return [event.nodes[0].id async for event in stub.Watch(request, timeout=CALL_TIMEOUT)]

    assert await call(cluster, node, watch) == [node.node_id] * 3
    ephemeral = EphemeralCredentials.for_key(generate_key(), cluster.ca.certificate)
    code, _ = await refused(call(cluster, ephemeral, watch))
    assert code is grpc.StatusCode.UNAUTHENTICATED


async def test_bidirectional_streaming_is_authorized(cluster: Cluster) -> None:
    async def heartbeats(channel: grpc.aio.Channel) -> list[int]:
        stub = curator_pb2_grpc.CuratorStub(channel)
        requests = [curator_pb2.HeartbeatRequest() for _ in range(3)]
        stream = stub.Heartbeat(iter(requests), timeout=CALL_TIMEOUT)
        return [response.interval.seconds async for response in stream]

    assert await call(cluster, cluster.ca.node(), heartbeats) == [5, 5, 5]
    code, details = await refused(call(cluster, cluster.ca.user(), heartbeats))
    assert code is grpc.StatusCode.PERMISSION_DENIED, details


async def test_cancelling_a_unary_call_stays_inside_its_cancel_scope(cluster: Cluster) -> None:
    """grpc issue 43502: without the wrapper, the cancellation escapes the scope."""
    ephemeral = EphemeralCredentials.for_key(generate_key(), cluster.ca.certificate)
    async with secure_channel(cluster.address, ephemeral) as channel:
        stub = curator_pb2_grpc.CuratorStub(channel)
        await stub.RegisterNode(curator_pb2.RegisterNodeRequest())  # connected
        scope = anyio.CancelScope()

        async def cancel_when_blocked() -> None:
            await anyio.wait_all_tasks_blocked()
            scope.cancel()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cancel_when_blocked)
            with scope:
                await stub.JoinNode(curator_pb2.JoinNodeRequest())  # never answers
        assert scope.cancelled_caught


def test_every_channel_pings_its_server_and_a_caller_may_change_how(
    ca: CA, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[list[tuple[str, Any]]] = []

    def recording(target: str, credentials: Any, options: list[tuple[str, Any]]) -> Any:
        made.append(options)
        return None

    monkeypatch.setattr(grpc.aio, "secure_channel", recording)
    credentials = ca.node()
    secure_channel("127.0.0.1:1", credentials)
    secure_channel("127.0.0.1:1", credentials, options=[("grpc.keepalive_time_ms", 1_000)])
    default, changed = (dict(options) for options in made)
    assert {name: default[name] for name, _ in KEEPALIVE_OPTIONS} == {
        "grpc.keepalive_time_ms": 10_000,
        "grpc.keepalive_timeout_ms": 5_000,
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.http2.max_pings_without_data": 0,
    }
    assert {name: default[name] for name, _ in RECONNECT_OPTIONS} == {
        "grpc.initial_reconnect_backoff_ms": 250,
        "grpc.max_reconnect_backoff_ms": 5_000,
    }
    assert changed == {**default, "grpc.keepalive_time_ms": 1_000}
    assert len(made[1]) == len(made[0])  # replaced, not given twice


def test_no_channel_or_server_probes_the_bandwidth(ca: CA, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each probe is a PING round trip after data arrives: on an idle node, two of the four
    round trips of every heartbeat (``FLOW_CONTROL_OPTIONS``)."""
    made: list[list[tuple[str, Any]]] = []

    def recording(*args: Any, options: list[tuple[str, Any]], **_: Any) -> Any:
        made.append(options)
        return None

    monkeypatch.setattr(grpc.aio, "secure_channel", recording)
    monkeypatch.setattr(grpc.aio, "server", recording)
    secure_channel("127.0.0.1:1", ca.node())
    create_server(ca.node())
    assert FLOW_CONTROL_OPTIONS == (("grpc.http2.bdp_probe", 0),)
    assert [dict(options)["grpc.http2.bdp_probe"] for options in made] == [0, 0]


def test_every_server_permits_the_clients_pings(ca: CA, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[list[tuple[str, Any]]] = []

    def recording(*, interceptors: Any, options: list[tuple[str, Any]]) -> Any:
        made.append(options)
        return None

    monkeypatch.setattr(grpc.aio, "server", recording)
    create_server(ca.node(), options=[("grpc.so_reuseport", 0)])
    [options] = made
    policy = dict(options)
    assert policy == {
        **dict(KEEPALIVE_POLICY),
        **dict(REQUEST_LIMITS),
        **dict(FLOW_CONTROL_OPTIONS),
        "grpc.so_reuseport": 0,
    }
    pings_every_ms = dict(KEEPALIVE_OPTIONS)["grpc.keepalive_time_ms"]
    assert policy["grpc.http2.min_recv_ping_interval_without_data_ms"] <= pings_every_ms
    assert policy["grpc.keepalive_permit_without_calls"] == 1
    assert policy["grpc.http2.max_ping_strikes"] == 0  # a burst after a stall is no abuse


# -- requests that do not parse, and the request size limit ---------------------------------

NOT_UTF8 = b"\x0a\x02\xc3\x28"
"""An UpdateNodeStatusRequest or HeartbeatRequest whose field 1 (a string) is not UTF-8."""


class LoggedTracebacks(logging.Handler):
    """ERROR records with a traceback, logged while installed on the root logger."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None:
            self.records.append(record)


@pytest.fixture
def tracebacks() -> Iterator[LoggedTracebacks]:
    handler = LoggedTracebacks()
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)


async def test_a_unary_request_that_is_not_utf8_is_refused_as_invalid(
    cluster: Cluster, tracebacks: LoggedTracebacks
) -> None:
    """Was UNKNOWN ("Unexpected DecodeError"), with a traceback logged by grpc: found by the
    fuzz suites (issue 11, item 5)."""

    def update(channel: Any) -> Any:  # raw bytes: the stubs' types do not fit
        return channel.unary_unary("/roleserve.curator.Curator/UpdateNodeStatus")(
            NOT_UTF8, timeout=CALL_TIMEOUT
        )

    code, details = await refused(call(cluster, cluster.ca.node(), update))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid roleserve.curator.UpdateNodeStatusRequest" in details
    assert "UTF-8" in details
    assert cluster.recorder.peers == []  # the handler never ran
    assert tracebacks.records == []


async def test_a_request_stream_ends_invalid_at_a_request_that_does_not_parse(
    cluster: Cluster, tracebacks: LoggedTracebacks
) -> None:
    def beats(channel: Any) -> Awaitable[Any]:
        stream = channel.stream_stream("/roleserve.curator.Curator/Heartbeat")(
            iter([b"", NOT_UTF8]), timeout=CALL_TIMEOUT
        )

        async def read() -> list[bytes]:
            return [response async for response in stream]

        return read()

    code, details = await refused(call(cluster, cluster.ca.node(), beats))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid roleserve.curator.HeartbeatRequest" in details
    assert tracebacks.records == []


async def test_a_refused_caller_learns_its_refusal_before_a_bad_request(cluster: Cluster) -> None:
    def update(channel: Any) -> Any:  # raw bytes: the stubs' types do not fit
        return channel.unary_unary("/roleserve.curator.Curator/UpdateNodeStatus")(
            NOT_UTF8, timeout=CALL_TIMEOUT
        )

    code, _ = await refused(call(cluster, cluster.ca.user(), update))
    assert code is grpc.StatusCode.PERMISSION_DENIED


async def test_a_request_beyond_the_limit_is_refused_naming_it(cluster: Cluster) -> None:
    """Beyond the limit, refused before any handler (so before etcd) as the caller's
    mistake, naming the limit; far beyond it, gRPC refuses it unread."""

    def update(size: int) -> Callable[[grpc.aio.Channel], Awaitable[Any]]:
        request = curator_pb2.UpdateNodeStatusRequest(instance="x" * size)
        return lambda channel: curator_pb2_grpc.CuratorStub(channel).UpdateNodeStatus(
            request, timeout=CALL_TIMEOUT
        )

    node = cluster.ca.node()
    await call(cluster, node, update(MAX_REQUEST_BYTES - 16))  # the whole request fits
    code, details = await refused(call(cluster, node, update(MAX_REQUEST_BYTES)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    too_large = curator_pb2.UpdateNodeStatusRequest(instance="x" * MAX_REQUEST_BYTES)
    assert details == (
        f"the request is {too_large.ByteSize():,} bytes; a request may be at most "
        f"{MAX_REQUEST_BYTES:,} bytes (1 MiB)"
    )
    code, details = await refused(call(cluster, node, update(MAX_READ_BYTES)))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, details
