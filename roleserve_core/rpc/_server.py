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
                ├── a user whose certificate the server's Revocations name ──▶ PERMISSION_DENIED,
                │       marked (REVOKED_METADATA), whatever the method needs; a response
                │       stream open when it is revoked ends the same way
                ├── a needed permission missing ──▶ PERMISSION_DENIED (a user: naming its
                │       scope and the scope that would do)
                ├── a node the server's NodeGate refuses ──▶ PERMISSION_DENIED, marked
                │       (NODE_REFUSED_METADATA); a response stream open when the gate
                │       starts refusing its node ends the same way
                └── handler, with current_peer() = the node or user

The gate is the server's last word on nodes whose certificate is still valid: the leading
curator's refuses decommissioned nodes (a certificate cannot be taken back). It sits here,
where every authenticated call passes, so that no method can forget it.

Servers are always nodes: they present their node certificate. Every server permits the
clients' keepalive pings (``KEEPALIVE_POLICY``; see ``KEEPALIVE_OPTIONS`` in ``_client``),
and refuses requests larger than ``limits.MAX_REQUEST_BYTES`` INVALID_ARGUMENT, naming the
limit, once the caller is admitted; gRPC answers one beyond ``limits.MAX_READ_BYTES``
RESOURCE_EXHAUSTED without reading it (``REQUEST_LIMITS``). Like every channel, no server
probes the bandwidth of its connections (``FLOW_CONTROL_OPTIONS`` in ``_client``): each
probe is a round trip that wakes both ends of an idle connection.

A request that does not parse as its method's message (bytes cut short, a string field that
is not UTF-8, which proto3 forbids) is answered INVALID_ARGUMENT, naming the message, once
the caller is admitted: grpc.aio would answer UNKNOWN and log a traceback, as if the server
had failed.

A node renews its certificate while it serves (``workers.renewal``): ``bind(...,
current=...)`` reads the latest credentials at each TLS handshake (gRPC's dynamic server
credentials), so new connections get the renewed certificate without a restart of the
server, and open ones keep theirs (TLS checks a certificate at the handshake only).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import grpc

from roleserve_core._public import publish
from roleserve_core.identity import NodeCredentials, certificate_to_pem, enrolment_ca
from roleserve_core.limits import MAX_READ_BYTES, request_too_large
from roleserve_core.ports import split_endpoint
from roleserve_core.process._ports import address_in_use
from roleserve_core.rpc._admission import ADMITTED_METADATA
from roleserve_core.rpc._authorization import (
    MethodAuthorization,
    method_authorization,
    permission_name,
    request_type,
    smallest_scope,
)
from roleserve_core.rpc._client import FLOW_CONTROL_OPTIONS
from roleserve_core.rpc._handlers import Context, Handler, rewrapped
from roleserve_core.rpc._peer import (
    NodePeer,
    Peer,
    PeerClassifier,
    UnauthenticatedPeer,
    UserPeer,
    _set_current_peer,
)
from roleserve_core.rpc._stats import StatsInterceptor
from roleserve_core.stats import RpcStats

__all__ = [
    "KEEPALIVE_POLICY",
    "LEADER_STARTING_METADATA",
    "NODE_REFUSED_METADATA",
    "REQUEST_LIMITS",
    "REVOKED_METADATA",
    "AuthorizationInterceptor",
    "NodeGate",
    "Revocations",
    "bind",
    "create_server",
    "leader_starting",
    "node_refusal",
    "server_credentials",
    "user_revocation",
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

REQUEST_LIMITS: tuple[tuple[str, int], ...] = (("grpc.max_receive_message_length", MAX_READ_BYTES),)
"""The largest request every server reads, if only to refuse it (``roleserve_core.limits``)."""

# Generic in the type stubs only: at run time the grpc classes are not subscriptable.


def server_credentials(
    credentials: NodeCredentials, current: Callable[[], NodeCredentials] | None = None
) -> grpc.ServerCredentials:
    """TLS for a node's server: its node certificate, client certificates required and
    verified against the cluster CA or the enrolment CA (see ``identity``).

    :param current: the latest credentials, asked at each handshake: the server presents
        the certificate they hold (a renewed one) from then on. None: ``credentials`` for
        good.
    """
    if current is None:
        return grpc.ssl_server_credentials(
            [(credentials.key_pem, credentials.certificate_pem)],
            root_certificates=_roots(credentials),
            require_client_auth=True,
        )
    presented = [credentials.certificate]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        latest = current()
        if latest.certificate == presented[0]:
            return None  # unchanged: gRPC keeps the configuration it has
        presented[0] = latest.certificate
        return _configuration(latest)

    # grpc's stubs type the fetcher's result without None, which its documentation allows
    # ("or None for no change").
    return grpc.dynamic_ssl_server_credentials(
        _configuration(credentials),
        fetch,  # type: ignore[arg-type]
        require_client_authentication=True,
    )


def _roots(credentials: NodeCredentials) -> bytes:
    return certificate_to_pem(credentials.ca_certificate) + certificate_to_pem(enrolment_ca()[1])


def _configuration(credentials: NodeCredentials) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(credentials.key_pem, credentials.certificate_pem)], root_certificates=_roots(credentials)
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
    if not missing:
        return None
    names = ", ".join(permission_name(p) for p in missing)
    if isinstance(peer, UserPeer):
        return grpc.StatusCode.PERMISSION_DENIED, _user_refusal(method, authorization, peer, names)
    return (
        grpc.StatusCode.PERMISSION_DENIED,
        f"node {peer.node_id} lacks {names}, needed by {method}",
    )


def _user_refusal(
    method: str, authorization: MethodAuthorization, peer: UserPeer, names: str
) -> str:
    """``viewer credentials cannot UpdateNodeRoles (needs MANAGE_ROLES); ask the owner for
    operator credentials``: what was refused, why, and which credentials would do."""
    name = method.rsplit("/", 1)[-1]
    scope = peer.scope or "unscoped"
    wanted = smallest_scope(authorization.need)
    remedy = (
        f"ask the owner for {wanted} credentials"
        if wanted is not None
        else "only nodes may call it"
    )
    return f"{scope} credentials cannot {name} (needs {names}); {remedy}"


LEADER_STARTING_KEY = "roleserve-leader-starting"
LEADER_STARTING_METADATA = ((LEADER_STARTING_KEY, "1"),)
"""Trailing metadata of an UNAVAILABLE from a curator that was just elected and does not
serve as the leader yet: the caller has the right address and should call again in a
moment (``leader_starting``), not wait for another leader to be found."""

NODE_REFUSED_KEY = "roleserve-node-refused"
NODE_REFUSED_METADATA = ((NODE_REFUSED_KEY, "1"),)
"""Trailing metadata of a call a ``NodeGate`` refused: the caller's node may not call the
cluster any more. Waiting cannot cure that, so a node stops on it (``node_refusal``)."""


class NodeGate(Protocol):
    """Which nodes, holding a valid certificate, a server refuses nevertheless."""

    async def refusal(self, node_id: str) -> str | None:
        """Why ``node_id`` may not call now (one line naming it and what to do); None if it
        may. May wait for what it needs to know (the leader's node cache)."""

    async def wait_refusal(self, node_id: str) -> str:
        """Return, with the reason, once ``node_id`` is refused (for open streams)."""


class Revocations(Protocol):
    """Which user certificates, valid and of the cluster, were revoked nevertheless."""

    def revoked(self, serial: int) -> bool:
        """Whether the user certificate with ``serial`` is revoked; asked on each call of a
        user, so it answers from memory (the leader's watch of etcd)."""

    async def wait_revoked(self, serial: int) -> None:
        """Return once the user certificate with ``serial`` is revoked (for open streams)."""


REVOKED_KEY = "roleserve-revoked"
REVOKED_METADATA = ((REVOKED_KEY, "1"),)
"""Trailing metadata of a call refused because the caller's user certificate was revoked.

Revocation is checked before the method's permissions, so a revoked certificate hears that
it was revoked whatever it asks, and a client tells it from a permission its scope lacks
by this mark (``ctl whoami`` with metrics credentials, which may call nothing)."""


def _revoked_refusal(peer: UserPeer) -> str:
    return (
        f"credentials {peer.identity!r} (serial {peer.serial:x}) were revoked; "
        "ask the owner for new credentials"
    )


def user_revocation(error: grpc.aio.AioRpcError) -> str | None:
    """The server's message, if ``error`` refused the caller's revoked user certificate."""
    if error.code() is not grpc.StatusCode.PERMISSION_DENIED:
        return None
    if any(key == REVOKED_KEY for key, _ in error.trailing_metadata() or ()):
        return str(error.details())
    return None


def leader_starting(error: grpc.aio.AioRpcError) -> bool:
    """Whether ``error`` is a just-elected curator's "retry" (``LEADER_STARTING_METADATA``)."""
    if error.code() is not grpc.StatusCode.UNAVAILABLE:
        return False
    metadata = error.trailing_metadata() or ()
    return any(key == LEADER_STARTING_KEY for key, _ in metadata)


def node_refusal(error: grpc.aio.AioRpcError) -> str | None:
    """The reason, if ``error`` is a ``NodeGate``'s refusal of the calling node."""
    if error.code() is not grpc.StatusCode.PERMISSION_DENIED:
        return None
    metadata = error.trailing_metadata() or ()
    if any(key == NODE_REFUSED_KEY for key, _ in metadata):
        return str(error.details())
    return None


async def _abort_refused(context: Context, reason: str) -> None:
    await context.abort(grpc.StatusCode.PERMISSION_DENIED, reason, NODE_REFUSED_METADATA)


Metadata = tuple[tuple[str, str], ...]
Admit = Callable[[Context], Awaitable["Guard"]]
Guard = Callable[[], Awaitable[tuple[str, Metadata]]] | None
"""What ends an admitted response stream: returns the reason, and the trailing metadata to
end the call with, once its caller is refused (a node by the gate, a user revoked)."""


async def _node_refused(gate: NodeGate, node_id: str) -> tuple[str, Metadata]:
    return await gate.wait_refusal(node_id), NODE_REFUSED_METADATA


async def _user_revoked(revocations: Revocations, peer: UserPeer) -> tuple[str, Metadata]:
    # No NODE_REFUSED_METADATA: that marks a node refused for good, which stops a node.
    await revocations.wait_revoked(peer.serial)
    return _revoked_refusal(peer), REVOKED_METADATA


class AuthorizationInterceptor(grpc.aio.ServerInterceptor):
    """Enforces every method's ``authorization`` option and sets ``current_peer()``."""

    def __init__(
        self,
        classifier: PeerClassifier,
        gate: NodeGate | None = None,
        revocations: Revocations | None = None,
    ) -> None:
        self.classifier = classifier
        self.gate = gate
        self.revocations = revocations

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

        async def admit(context: Context) -> Guard:
            peer = self.classifier.peer(context)
            if isinstance(peer, UserPeer) and authorization is not None:
                await self._refuse_revoked(peer, authorization, context)
            refusal = _refusal(method, authorization, peer)
            if refusal is not None:
                await context.abort(*refusal)
            _set_current_peer(peer)
            if _open_to_all(authorization):
                return None
            if isinstance(peer, UserPeer):
                return await self._admit_user(peer, context)
            if isinstance(peer, NodePeer):
                return await self._admit_node(peer, context)
            return None

        return _guarded(handler, admit, request_type(method))

    async def _refuse_revoked(
        self, peer: UserPeer, authorization: MethodAuthorization, context: Context
    ) -> None:
        """Refuse a revoked user, before its permissions are looked at (``REVOKED_METADATA``
        says why); a method open to all lets it in as anyone else."""
        revocations = self.revocations
        if revocations is None or _open_to_all(authorization):
            return
        if revocations.revoked(peer.serial):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED, _revoked_refusal(peer), REVOKED_METADATA
            )

    async def _admit_user(self, peer: UserPeer, context: Context) -> Guard:
        """What ends an admitted user's stream should it be revoked (``_refuse_revoked``
        refused it if it already was)."""
        revocations = self.revocations
        if revocations is None:
            return None
        return functools.partial(_user_revoked, revocations, peer)

    async def _admit_node(self, peer: NodePeer, context: Context) -> Guard:
        """Refuse a node the gate refuses; else what ends its stream should it be."""
        gate = self.gate
        if gate is None:
            return None
        reason = await gate.refusal(peer.node_id)
        if reason is not None:
            await _abort_refused(context, reason)
        return functools.partial(_node_refused, gate, peer.node_id)


def _open_to_all(authorization: MethodAuthorization | None) -> bool:
    """Whether the method lets anyone in: a gate has nothing to add to those."""
    return authorization is not None and authorization.allow_unauthenticated


class _Undecodable:
    """A request that did not parse: what the handler gets instead, to refuse it."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _tolerant(
    deserializer: Callable[[bytes], Any] | None, message: str
) -> Callable[[bytes], Any] | None:
    """``deserializer``, returning an ``_Undecodable`` where it raises, or where the request
    is larger than a request may be."""
    if deserializer is None:
        return None
    parse = deserializer

    def deserialize(data: bytes) -> Any:
        if (too_large := request_too_large(len(data))) is not None:
            return _Undecodable(too_large)
        try:
            return parse(data)
        except Exception as exc:  # protobuf's DecodeError, or any other parser's failure
            return _Undecodable(f"the request is not a valid {message}: {exc}")

    return deserialize


async def _refuse_undecodable(request: Any, context: Context) -> None:
    if isinstance(request, _Undecodable):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)


async def _checked_requests(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
    """A request stream, ended with INVALID_ARGUMENT at the first request that did not
    parse."""
    async for request in requests:
        await _refuse_undecodable(request, context)
        yield request


def _guarded(handler: Handler, admit: Admit, message: str | None = None) -> Handler:
    """``handler`` with ``admit(context)`` run before its behaviour, whatever its kind, and
    requests that do not parse (as ``message``) refused once admitted."""
    if handler.request_streaming:
        admit = _announcing(admit)
    streaming = handler.request_streaming
    return rewrapped(
        handler,
        lambda behaviour: _admitting_coroutine(behaviour, admit, streaming),
        lambda behaviour: _admitting_generator(behaviour, admit, streaming),
        request_deserializer=_tolerant(handler.request_deserializer, message or "request"),
    )


def _announcing(admit: Admit) -> Admit:
    """``admit``, then tell the client it may start sending (see ``ADMITTED_METADATA``)."""

    async def admit_and_announce(context: Context) -> Guard:
        guard = await admit(context)
        await context.send_initial_metadata(ADMITTED_METADATA)
        return guard

    return admit_and_announce


def _admitting_coroutine(
    behaviour: Callable[[Any, Context], Any], admit: Admit, streaming: bool
) -> Callable[[Any, Context], Awaitable[Any]]:
    async def guarded(request: Any, context: Context) -> Any:
        await admit(context)  # a unary answer comes at once: admission suffices
        if streaming:
            request = _checked_requests(request, context)
        else:
            await _refuse_undecodable(request, context)
        result = behaviour(request, context)
        return await result if inspect.isawaitable(result) else result

    return guarded


def _admitting_generator(
    behaviour: Callable[[Any, Context], AsyncIterator[Any]], admit: Admit, streaming: bool
) -> Callable[[Any, Context], AsyncIterator[Any]]:
    async def guarded(request: Any, context: Context) -> AsyncIterator[Any]:
        guard = await admit(context)
        if streaming:
            request = _checked_requests(request, context)
        else:
            await _refuse_undecodable(request, context)
        responses = behaviour(request, context)
        if guard is None:
            async for response in responses:
                yield response
            return
        async for response in _until_refused(responses, guard, context):
            yield response

    return guarded


async def _until_refused(
    responses: AsyncIterator[Any],
    guard: Callable[[], Awaitable[tuple[str, Metadata]]],
    context: Context,
) -> AsyncIterator[Any]:
    """``responses``, until ``guard`` returns: then the call ends with its refusal.

    The guard runs in a task of its own for the whole call. When it returns while the
    handler waits for its next response (a Watch for changes, a Heartbeat for requests),
    it cancels that wait; when it returns while a response is being sent, the call ends
    after that response. Precisely: a response is sent if the handler gave it before the
    guard returned; none given after is, even one that became ready in the same turn of
    the event loop (the caller is refused: what it was about to get is no longer its).
    A handler is expected to let the cancellation through (any ``await`` does); one that
    swallows it keeps the call open until it gives its next response, which is not sent
    either: the call then ends with the refusal.

    Responses are taken in the handler's own task, not in a task each: a leader sending
    one change to 10,000 Watch streams would otherwise create 10,000 tasks and wait on
    each, several turns of the event loop per stream. grpc.aio serves on asyncio, so this
    uses asyncio's tasks; the guard's copies the context, and so sees ``current_peer()``.
    """
    handler = asyncio.current_task()
    assert handler is not None
    waiting = interrupted = False

    def interrupt(_: asyncio.Future[Any]) -> None:
        nonlocal interrupted
        if waiting:
            interrupted = True
            handler.cancel()

    refused = asyncio.ensure_future(guard())
    refused.add_done_callback(interrupt)
    try:
        while not refused.done():
            waiting = True
            try:
                response = await anext(responses)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if not (refused.done() and handler.uncancel() == 0):
                    raise  # the call itself was cancelled
                break
            finally:
                waiting = False
            if interrupted:  # the handler swallowed our cancellation: take it back
                handler.uncancel()
            if refused.done():
                break  # given after the refusal: not the caller's any more
            yield response
        reason, metadata = refused.result()
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, reason, metadata)
    finally:
        refused.remove_done_callback(interrupt)
        await _discarded(refused)
        aclose = getattr(responses, "aclose", None)
        if aclose is not None:
            await aclose()


async def _discarded(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` unless done, and take its outcome (asyncio logs one never taken)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def create_server(
    credentials: NodeCredentials,
    *,
    classifier: PeerClassifier | None = None,
    options: Sequence[tuple[str, Any]] = (),
    gate: NodeGate | None = None,
    revocations: Revocations | None = None,
    stats: RpcStats | None = None,
) -> grpc.aio.Server:
    """A grpc.aio server that authorizes every call for the cluster of ``credentials``.

    Add servicers, then ``server.add_secure_port(address, server_credentials(credentials))``.

    :param options: gRPC server options, added to (and replacing the same names of)
        ``KEEPALIVE_POLICY``, ``REQUEST_LIMITS`` and ``FLOW_CONTROL_OPTIONS`` (no
        bandwidth probes: see there).
    :param gate: nodes refused although their certificate is valid (see ``NodeGate``).
    :param revocations: user certificates refused although valid (see ``Revocations``).
    :param stats: where to count the calls handled, refused ones included (the node's
        ``NodeIntrospection.stats.rpc``, which the metrics plugin reads); None: not counted.
    """
    classifier = classifier or PeerClassifier(credentials.ca_certificate)
    given = {option for option, _ in options}
    defaults = (*KEEPALIVE_POLICY, *REQUEST_LIMITS, *FLOW_CONTROL_OPTIONS)
    policy = [(option, value) for option, value in defaults if option not in given]
    authorization = AuthorizationInterceptor(classifier, gate, revocations)
    counting = [StatsInterceptor(stats)] if stats is not None else []
    return grpc.aio.server(
        interceptors=[*counting, authorization],
        options=[*policy, *options],
    )


def bind(
    server: grpc.aio.Server,
    address: str,
    credentials: NodeCredentials,
    current: Callable[[], NodeCredentials] | None = None,
) -> int:
    """Listen on ``address`` (``host:port``; port 0 picks one) with the node's TLS.

    :param current: the latest credentials, for a server that presents a renewed
        certificate without a restart (see ``server_credentials``).
    :returns: the port bound.
    :raises AddressInUseError: if another process holds the address (a ``ResourceError``:
        one line, retried, naming the address and the holder).
    :raises OSError: if the address cannot be bound otherwise, naming it.
    """
    try:
        port = server.add_secure_port(address, server_credentials(credentials, current))
    except RuntimeError as exc:
        raise _listen_error(address, f": {exc}") from None
    if port == 0:
        raise _listen_error(address, "")
    return port


def _listen_error(address: str, said: str) -> OSError:
    """Why ``bind`` failed: the address held by another process, asked of the kernel
    (gRPC says only that it failed, with a hint to debug it), else what gRPC said."""
    try:
        host, port = split_endpoint(address, 0)
    except ValueError:
        return OSError(f"cannot listen on {address}{said}")
    return address_in_use(host, port) or OSError(f"cannot listen on {address}{said}")


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.rpc", globals(), __all__)
