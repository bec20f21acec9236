"""Scoped user credentials: every scope against every method of the API, over mTLS.

The methods come from the service descriptors, so a method added later is called too; what
each scope may call is written out here by hand, so the test checks the protos' options and
the scope table against what issue 11 asks, not against themselves. Each call goes through
a real grpc.aio server on loopback whose handlers answer at once: the interceptor decides.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from cryptography import x509
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from roleserve_core.identity import (
    LEGACY_SCOPE_OID,
    SCOPE_OID,
    Scope,
    UserCredentials,
    certificate_scope,
    generate_key,
    issue_certificate,
    issue_user_certificate,
)
from roleserve_core.proto import curator_pb2, management_pb2, nodemanagement_pb2
from roleserve_core.rpc import (
    SCOPE_PERMISSIONS,
    USER_PERMISSIONS,
    PeerClassifier,
    UserPeer,
    bind,
    create_server,
    secure_channel,
)
from roleserve_core.testing import ThrowawayCA

pytestmark = pytest.mark.anyio

CALL_TIMEOUT = 10.0

SERVICES: tuple[ServiceDescriptor, ...] = (
    curator_pb2.DESCRIPTOR.services_by_name["Curator"],
    curator_pb2.DESCRIPTOR.services_by_name["CuratorLocal"],
    management_pb2.DESCRIPTOR.services_by_name["Management"],
    nodemanagement_pb2.DESCRIPTOR.services_by_name["NodeManagement"],
)

OPEN = {"RegisterNode", "CommitNode", "JoinNode", "GetCurrentLeader", "GetCACertificate"}
"""Methods anyone may call (enrolment, finding the leader)."""
NODE_ONLY = {"UpdateNodeStatus", "Heartbeat", "UpdateNodeClusterNetworking", "RenewCertificate"}
VIEWER = {
    "Watch",
    "WatchRevokedCredentials",
    "GetClusterInfo",
    "GetNodes",
    "GetConsensusStatus",
    "GetLogs",
    "GetSupervisionTree",
    "GetValues",
}
OPERATOR = VIEWER | {
    "ApproveNode",
    "UpdateNodeRoles",
    "DecommissionNode",
    "RebuildConsensusMember",
    "RestartRunnable",
}
OWNER_ONLY = {"GetRegisterTicket", "IssueCredentials", "ListCredentials", "RevokeCredentials"}

ALLOWED: dict[str | None, set[str]] = {
    None: OPEN | OPERATOR | OWNER_ONLY,  # a certificate without the extension
    Scope.OWNER: OPEN | OPERATOR | OWNER_ONLY,
    Scope.OPERATOR: OPEN | OPERATOR,
    Scope.VIEWER: OPEN | VIEWER,
    Scope.METRICS: set(OPEN),
}


def methods() -> Iterator[tuple[ServiceDescriptor, MethodDescriptor]]:
    for service in SERVICES:
        for method in service.methods:
            yield service, method


def test_every_method_is_in_the_table() -> None:
    names = {method.name for _, method in methods()}
    assert names == OPEN | NODE_ONLY | OPERATOR | OWNER_ONLY


def _answer_at_once(method: MethodDescriptor) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of ``method``'s kind that answers with one empty message."""

    async def unary(request: Any, context: Any) -> bytes:
        return b""

    async def streaming(request: Any, context: Any) -> AsyncIterator[bytes]:
        yield b""

    kinds: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    build = kinds[(method.client_streaming, method.server_streaming)]
    return build(streaming if method.server_streaming else unary)


@dataclass
class Server:
    ca: ThrowawayCA
    address: str


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    ca = ThrowawayCA()
    credentials = ca.node()
    served = create_server(credentials)
    for service in SERVICES:
        handlers = {method.name: _answer_at_once(method) for method in service.methods}
        served.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service.full_name, handlers),)
        )
    port = bind(served, "127.0.0.1:0", credentials)
    await served.start()
    try:
        yield Server(ca, f"127.0.0.1:{port}")
    finally:
        await served.stop(None)


def scoped(ca: ThrowawayCA, scope: Scope | None, name: str = "someone") -> UserCredentials:
    key = generate_key()
    certificate = issue_user_certificate(
        ca.key, ca.certificate, key.public_key(), name, scope=scope
    )
    return UserCredentials(key, certificate, ca.certificate)


async def status_of(
    channel: Any, service: ServiceDescriptor, method: MethodDescriptor
) -> tuple[grpc.StatusCode, str]:
    """The status of one call of ``method`` with an empty request (``channel`` untyped:
    the calls send and receive raw bytes, which the stubs' types do not know)."""
    path = f"/{service.full_name}/{method.name}"
    try:
        if method.client_streaming:
            call: Any = channel.stream_stream(path)(iter([b""]), timeout=CALL_TIMEOUT)
        elif method.server_streaming:
            call = channel.unary_stream(path)(b"", timeout=CALL_TIMEOUT)
        else:
            await channel.unary_unary(path)(b"", timeout=CALL_TIMEOUT)
            return grpc.StatusCode.OK, ""
        async for _ in call:
            pass
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.mark.parametrize("scope", list(ALLOWED), ids=lambda s: s or "no-extension")
async def test_each_scope_may_call_exactly_its_methods(server: Server, scope: Scope | None) -> None:
    credentials = scoped(server.ca, scope)
    seen: dict[str, grpc.StatusCode] = {}
    async with secure_channel(server.address, credentials) as channel:
        for service, method in methods():
            seen[method.name], _ = await status_of(channel, service, method)
    expected = {
        name: grpc.StatusCode.OK if name in ALLOWED[scope] else grpc.StatusCode.PERMISSION_DENIED
        for name in seen
    }
    assert seen == expected


async def test_a_refusal_names_the_scope_the_method_and_what_would_do(server: Server) -> None:
    service = SERVICES[2]
    method = service.methods_by_name["UpdateNodeRoles"]
    async with secure_channel(server.address, scoped(server.ca, Scope.VIEWER)) as channel:
        code, details = await status_of(channel, service, method)
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        "viewer credentials cannot UpdateNodeRoles (needs MANAGE_ROLES); "
        "ask the owner for operator credentials"
    )


async def test_a_node_only_method_refused_to_a_user_says_so(server: Server) -> None:
    service = SERVICES[0]
    method = service.methods_by_name["UpdateNodeStatus"]
    async with secure_channel(server.address, scoped(server.ca, Scope.OWNER)) as channel:
        _, details = await status_of(channel, service, method)
    assert details == (
        "owner credentials cannot UpdateNodeStatus (needs UPDATE_NODE_SELF); only nodes may call it"
    )


def test_the_scope_travels_in_a_non_critical_extension() -> None:
    ca = ThrowawayCA()
    certificate = scoped(ca, Scope.METRICS).certificate
    extension = certificate.extensions.get_extension_for_oid(SCOPE_OID)
    assert not extension.critical
    assert isinstance(extension.value, x509.UnrecognizedExtension)
    assert extension.value.value == b"\x0c\x07metrics"  # DER UTF8String "metrics"
    assert certificate_scope(certificate) == "metrics"


def test_every_arc_of_the_oid_fits_what_go_parses() -> None:
    """Go's x509 parser refuses a certificate with an extension OID arc of 2^31 or more
    ("malformed extension OID field"): Prometheus could not use a metrics certificate."""
    arcs = [int(arc) for arc in SCOPE_OID.dotted_string.split(".")]
    assert max(arcs) < 2**31
    assert uuid.UUID(int=int(LEGACY_SCOPE_OID.dotted_string.split(".")[-1])) == uuid.UUID(
        "".join(f"{arc:04x}" for arc in arcs[-7:-2]) + "".join(f"{arc:06x}" for arc in arcs[-2:])
    )  # the same UUID as the first version's OID


@pytest.mark.parametrize("scope", ["viewer", "metrics"])
def test_a_certificate_with_the_first_versions_oid_keeps_its_scope(scope: str) -> None:
    ca = ThrowawayCA()
    key = generate_key()
    name = scope.encode()
    legacy = x509.UnrecognizedExtension(LEGACY_SCOPE_OID, bytes([0x0C, len(name)]) + name)
    certificate = issue_certificate(
        ca.key, ca.certificate, key.public_key(), "alice", extensions=[legacy]
    )
    assert certificate_scope(certificate) == scope  # never an owner's


def test_a_certificate_without_the_extension_is_the_owners() -> None:
    ca = ThrowawayCA()
    peer = PeerClassifier(ca.certificate).classify(ca.user().certificate)
    assert isinstance(peer, UserPeer)
    assert (peer.scope, peer.permissions) == ("owner", USER_PERMISSIONS)


def test_an_unknown_scope_holds_no_permission() -> None:
    ca = ThrowawayCA()
    key = generate_key()
    unknown = x509.UnrecognizedExtension(SCOPE_OID, b"\x0c\x04root")
    certificate = issue_certificate(
        ca.key, ca.certificate, key.public_key(), "mallory", extensions=[unknown]
    )
    peer = PeerClassifier(ca.certificate).classify(certificate)
    assert isinstance(peer, UserPeer)
    assert (peer.scope, peer.permissions) == ("root", frozenset())
    assert "root" not in SCOPE_PERMISSIONS
