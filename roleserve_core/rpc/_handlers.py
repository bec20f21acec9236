"""Wrapping a gRPC method handler's behaviour, whatever its kind: what the server's
interceptors (authorization, counting) share."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

__all__ = ["Context", "Handler", "rewrapped"]

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"

Behaviour: TypeAlias = Callable[[Any, Context], Any]
"""A handler's behaviour: a coroutine function, or an async generator function (a stream
of responses)."""


class _Same:
    """``rewrapped``'s default: the handler's own request deserializer."""


_SAME = _Same()

_KINDS: dict[tuple[bool, bool], tuple[str, Callable[..., Handler]]] = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}


def rewrapped(
    handler: Handler,
    coroutine: Callable[[Behaviour], Callable[[Any, Context], Awaitable[Any]]],
    generator: Callable[[Behaviour], Callable[[Any, Context], AsyncIterator[Any]]],
    *,
    request_deserializer: Callable[[bytes], Any] | _Same | None = _SAME,
) -> Handler:
    """``handler`` of the same kind, its behaviour wrapped by ``generator`` if it is an
    async generator function, else by ``coroutine``; its request deserializer replaced
    when one is given (the authorization's, which turns a request that does not parse
    into a refusal instead of an error gRPC logs)."""
    attribute, build = _KINDS[(handler.request_streaming, handler.response_streaming)]
    behaviour = getattr(handler, attribute)
    wrap = generator if inspect.isasyncgenfunction(behaviour) else coroutine
    return build(
        wrap(behaviour),
        request_deserializer=(
            handler.request_deserializer
            if isinstance(request_deserializer, _Same)
            else request_deserializer
        ),
        response_serializer=handler.response_serializer,
    )
