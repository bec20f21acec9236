"""The server side: TLS credentials of a node, and the interceptor that authorizes calls.

::

    client ──TLS (client certificate required; roots: cluster CA + enrolment CA)──▶ server
             │
             ▼ AuthorizationInterceptor, per call:
             1. the method's authorization option     none ──▶ INTERNAL (fail safe)
             2. the peer, from the client certificate
             3. allow_unauthenticated? ──yes──▶ handler (any peer; current_peer() tells who)
                │ no
                ├── unauthenticated peer  ──▶ UNAUTHENTICATED
                ├── a needed permission missing ──▶ PERMISSION_DENIED
                └── handler, with current_peer() = the node or user

Servers are always nodes: they present their node certificate. Every server permits the
clients' keepalive pings (``KEEPALIVE_POLICY``; see ``KEEPALIVE_OPTIONS`` in ``_client``).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import grpc

from roleserve_core.identity import NodeCredentials, certificate_to_pem, enrolment_ca
from roleserve_core.rpc._authorization import (
    MethodAuthorization,
    method_authorization,
    permission_name,
)
from roleserve_core.rpc._peer import (
    Peer,
    PeerClassifier,
    UnauthenticatedPeer,
    UserPeer,
    _set_current_peer,
)

__all__ = [
    "KEEPALIVE_POLICY",
    "AuthorizationInterceptor",
    "bind",
    "create_server",
    "server_credentials",
]

KEEPALIVE_POLICY: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
)
"""Accept a client's pings every 5 s or more, with or without calls: the clients ping every
10 s (``KEEPALIVE_OPTIONS``). gRPC's defaults (pings only during calls, at most one per
5 minutes without data) count these pings as strikes and close the connection with GOAWAY
``too_many_pings`` after two. And never count strikes at all: a server resumed after a
stall (SIGSTOP, a paused VM) reads the pings its clients sent meanwhile in one burst, and
answered every connection with GOAWAY ``too_many_pings`` (seen in benchmarks/failover.py)."""

# Generic in the type stubs only: at run time the grpc classes are not subscriptable.
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def server_credentials(credentials: NodeCredentials) -> grpc.ServerCredentials:
    """TLS for a node's server: its node certificate, client certificates required and
    verified against the cluster CA or the enrolment CA (see ``identity``)."""
    roots = certificate_to_pem(credentials.ca_certificate) + certificate_to_pem(enrolment_ca()[1])
    return grpc.ssl_server_credentials(
        [(credentials.key_pem, credentials.certificate_pem)],
        root_certificates=roots,
        require_client_auth=True,
    )


def _refusal(
    method: str, authorization: MethodAuthorization | None, peer: Peer
) -> tuple[grpc.StatusCode, str] | None:
    """Why ``peer`` may not call ``method``, or None if it may."""
    if authorization is None:
        return (
            grpc.StatusCode.INTERNAL,
            f"{method} declares no authorization; refused (fail safe)",
        )
    if authorization.allow_unauthenticated:
        return None
    if isinstance(peer, UnauthenticatedPeer):
        return (
            grpc.StatusCode.UNAUTHENTICATED,
            f"{method} needs a node or user certificate of this cluster",
        )
    missing = sorted(authorization.need - peer.permissions)
    if missing:
        who = f"user {peer.identity!r}" if isinstance(peer, UserPeer) else f"node {peer.node_id}"
        names = ", ".join(permission_name(p) for p in missing)
        return grpc.StatusCode.PERMISSION_DENIED, f"{who} lacks {names}, needed by {method}"
    return None


Admit = Callable[[Context], Awaitable[None]]

ADMITTED_METADATA_KEY = "roleserve-admitted"
ADMITTED_METADATA = ((ADMITTED_METADATA_KEY, "1"),)
"""Initial metadata the server sends once it admitted a call with a request stream.

A grpc.aio client that is still writing requests when the server ends the call reports
INTERNAL ("Internal error from Core") instead of the server's status (grpc issues 36066 and
43486), which would hide every refusal of a streaming call. So the client of
``secure_channel`` starts writing only once the server announced the call admitted; a
refused call ends before any request is written, and its status reaches the caller intact.
The handler itself can therefore not send initial metadata of its own on such methods."""


class AuthorizationInterceptor(grpc.aio.ServerInterceptor):
    """Enforces every method's ``authorization`` option and sets ``current_peer()``."""

    def __init__(self, classifier: PeerClassifier) -> None:
        self.classifier = classifier

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None  # unknown method: grpc answers UNIMPLEMENTED
        method: str = handler_call_details.method
        authorization = method_authorization(method)

        async def admit(context: Context) -> None:
            peer = self.classifier.peer(context)
            refusal = _refusal(method, authorization, peer)
            if refusal is not None:
                await context.abort(*refusal)
            _set_current_peer(peer)

        return _guarded(handler, admit)


def _guarded(handler: Handler, admit: Admit) -> Handler:
    """``handler`` with ``admit(context)`` run before its behaviour, whatever its kind."""
    kinds: dict[tuple[bool, bool], tuple[str, Callable[..., Handler]]] = {
        (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
        (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
        (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
        (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
    }
    attribute, build = kinds[(handler.request_streaming, handler.response_streaming)]
    behaviour = getattr(handler, attribute)
    if handler.request_streaming:
        admit = _announcing(admit)
    return build(
        _admitting_generator(behaviour, admit)
        if inspect.isasyncgenfunction(behaviour)
        else _admitting_coroutine(behaviour, admit),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _announcing(admit: Admit) -> Admit:
    """``admit``, then tell the client it may start sending (see ``ADMITTED_METADATA``)."""

    async def admit_and_announce(context: Context) -> None:
        await admit(context)
        await context.send_initial_metadata(ADMITTED_METADATA)

    return admit_and_announce


def _admitting_coroutine(
    behaviour: Callable[[Any, Context], Any], admit: Admit
) -> Callable[[Any, Context], Awaitable[Any]]:
    async def guarded(request: Any, context: Context) -> Any:
        await admit(context)
        result = behaviour(request, context)
        return await result if inspect.isawaitable(result) else result

    return guarded


def _admitting_generator(
    behaviour: Callable[[Any, Context], AsyncIterator[Any]], admit: Admit
) -> Callable[[Any, Context], AsyncIterator[Any]]:
    async def guarded(request: Any, context: Context) -> AsyncIterator[Any]:
        await admit(context)
        async for response in behaviour(request, context):
            yield response

    return guarded


def create_server(
    credentials: NodeCredentials,
    *,
    classifier: PeerClassifier | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Server:
    """A grpc.aio server that authorizes every call for the cluster of ``credentials``.

    Add servicers, then ``server.add_secure_port(address, server_credentials(credentials))``.

    :param options: gRPC server options, added to (and replacing the same names of)
        ``KEEPALIVE_POLICY``.
    """
    classifier = classifier or PeerClassifier(credentials.ca_certificate)
    given = {option for option, _ in options}
    policy = [(option, value) for option, value in KEEPALIVE_POLICY if option not in given]
    return grpc.aio.server(
        interceptors=[AuthorizationInterceptor(classifier)], options=[*policy, *options]
    )


def bind(server: grpc.aio.Server, address: str, credentials: NodeCredentials) -> int:
    """Listen on ``address`` (``host:port``; port 0 picks one) with the node's TLS.

    :returns: the port bound.
    :raises OSError: if the address cannot be bound, naming it.
    """
    try:
        port = server.add_secure_port(address, server_credentials(credentials))
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return port
