"""What a follower answers for the leader's services: UNAVAILABLE, "this curator is not the
leader; the leader is ...".

Only the leader serves ``Curator`` and ``Management``. Without this handler a follower's
server answers their methods UNIMPLEMENTED ("Method not found!"), which tells a client
holding a channel to a former leader that its code is wrong, when all that happened is a
change of leader: its workers logged an unexpected failure with a traceback, where one
WARNING line and a new search for the leader is right. UNAVAILABLE is the status gRPC
gives for "try again elsewhere or later", and what clients already treat as expected.

The message says what the follower knows at the time of the call, read from the election
(at most ``LOOKUP_TIMEOUT`` s): who leads and where, that nobody leads now, or that it cannot
tell. It does not say "the leader changed": a client that called a follower from the start
(a stale address list, a user's typo) saw no change; ``errors.py`` says so only for a
leadership lost during the call.

The authorization interceptor runs first, as for every method, so a caller that may not
call the method is still refused for that, not told who leads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol

import anyio
import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from roleserve_controlplane.consensus import EtcdRequestError, Leader
from roleserve_controlplane.curator.service_local import leader_value
from roleserve_core import curator_pb2, management_pb2
from roleserve_core.rpc import LEADER_STARTING_METADATA

__all__ = ["LEADER_SERVICES", "LOOKUP_TIMEOUT", "NotLeadingHandler", "not_leading", "refusal"]

Metadata = tuple[tuple[str, str], ...]

LOOKUP_TIMEOUT = 2.0
"""Seconds a refusal may spend asking the election who leads (without a quorum, etcd's read
would wait for one)."""

LEADER_SERVICES = {
    service.full_name: service
    for service in (
        curator_pb2.DESCRIPTOR.services_by_name["Curator"],
        management_pb2.DESCRIPTOR.services_by_name["Management"],
    )
}
"""The services only the leading curator serves, by full name."""


class LeaderSource(Protocol):
    """What the refusal reads of ``consensus.Election``."""

    async def leader(self) -> Leader | None: ...


async def not_leading(node_id: str, election: LeaderSource | None) -> str:
    """Why the curator of ``node_id`` refuses a leader's method, and where to go instead."""
    message, _ = await refusal(node_id, election)
    return message


async def refusal(node_id: str, election: LeaderSource | None) -> tuple[str, Metadata]:
    """``not_leading``'s message, and the trailing metadata to refuse with: the election
    names this very curator (it won, and its leader's server is not up yet), marked
    ``LEADER_STARTING_METADATA`` so that the caller retries soon on the same address."""
    message = await _why_not(node_id, election)
    starting = message == _just_elected(node_id)
    return message, LEADER_STARTING_METADATA if starting else ()


def _just_elected(node_id: str) -> str:
    return f"curator {node_id} was just elected and starts serving as the leader; retry"


async def _why_not(node_id: str, election: LeaderSource | None) -> str:
    this = f"curator {node_id} is not the leader"
    if election is None:
        return f"{this}; ask any curator for the leader (GetCurrentLeader) and call it there"
    try:
        with anyio.fail_after(LOOKUP_TIMEOUT):
            leader = await election.leader()
    except (EtcdRequestError, TimeoutError) as exc:
        said = str(exc) or f"its etcd did not answer within {LOOKUP_TIMEOUT:g} s"
        return (
            f"{this}, and cannot tell who is ({said}); "
            "ask another curator for the leader (GetCurrentLeader)"
        )
    if leader is None:
        return (
            f"{this}, and no curator leads now (an election is under way, or the consensus "
            "has no quorum); retry, asking any curator for the leader (GetCurrentLeader)"
        )
    value = leader_value(leader)
    if value.node_id == node_id:
        return _just_elected(node_id)
    return (
        f"{this}; the leader is curator {value.node_id} at {value.host}:{value.port}: call it there"
    )


class NotLeadingHandler(grpc.GenericRpcHandler):
    """Answers every method of ``LEADER_SERVICES`` (and of the plugins' services the leader
    serves) with UNAVAILABLE naming this curator and, read from ``election``, the leader."""

    def __init__(
        self,
        node_id: str,
        more: Iterable[ServiceDescriptor] = (),
        election: LeaderSource | None = None,
    ) -> None:
        """:param more: plugins' services the leader serves too (``extension``).
        :param election: where the leader is read at each refusal; None: the message only
            says to ask ``GetCurrentLeader``."""
        self.services = {**LEADER_SERVICES, **{service.full_name: service for service in more}}
        self.node_id = node_id
        self.election = election

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        _, service_name, method_name = handler_call_details.method.split("/", 2)
        service = self.services.get(service_name)
        method = service.methods_by_name.get(method_name) if service else None
        return None if method is None else self._handler(method)

    def _handler(self, method: MethodDescriptor) -> grpc.RpcMethodHandler[Any, Any]:
        """A handler of the method's own shape (unary or streaming on either side)."""

        async def refuse(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            message, metadata = await refusal(self.node_id, self.election)
            await context.abort(grpc.StatusCode.UNAVAILABLE, message, metadata)

        async def refuse_streaming(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            await refuse(request, context)
            yield  # unreachable: abort raises; the yield makes this a stream

        factories: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }
        shape = (method.client_streaming, method.server_streaming)
        return factories[shape](refuse_streaming if method.server_streaming else refuse)
