"""What a follower answers for the leader's services: UNAVAILABLE, "this curator does not lead".

Only the leader serves ``Curator`` and ``Management``. Without this handler a follower's
server answers their methods UNIMPLEMENTED ("Method not found!"), which tells a client
holding a channel to a former leader that its code is wrong, when all that happened is a
change of leader: its workers logged an unexpected failure with a traceback, where one
WARNING line and a new search for the leader is right. UNAVAILABLE is the status gRPC
gives for "try again elsewhere or later", and what clients already treat as expected.

The authorization interceptor runs first, as for every method, so a caller that may not
call the method is still refused for that, not told who leads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor

from roleserve_core import curator_pb2, management_pb2

__all__ = ["LEADER_SERVICES", "NotLeadingHandler"]

LEADER_SERVICES = {
    service.full_name: service
    for service in (
        curator_pb2.DESCRIPTOR.services_by_name["Curator"],
        management_pb2.DESCRIPTOR.services_by_name["Management"],
    )
}
"""The services only the leading curator serves, by full name."""


class NotLeadingHandler(grpc.GenericRpcHandler):
    """Answers every method of ``LEADER_SERVICES`` with UNAVAILABLE naming this curator."""

    def __init__(self, node_id: str) -> None:
        self.message = (
            f"curator {node_id} does not lead the cluster now (the leader changed); "
            "ask any curator for the leader (GetCurrentLeader) and call it there"
        )

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        _, service_name, method_name = handler_call_details.method.split("/", 2)
        service = LEADER_SERVICES.get(service_name)
        method = service.methods_by_name.get(method_name) if service else None
        return None if method is None else self._handler(method)

    def _handler(self, method: MethodDescriptor) -> grpc.RpcMethodHandler[Any, Any]:
        """A handler of the method's own shape (unary or streaming on either side)."""
        message = self.message

        async def refuse(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)

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
