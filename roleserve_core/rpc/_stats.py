"""Counting the calls a server handles: ``StatsInterceptor`` feeds a ``stats.RpcStats``.

It sits outside the authorization interceptor (``create_server(stats=...)``), so a call
refused there counts too, with its code (PERMISSION_DENIED, UNAUTHENTICATED). A call's
code is what the handler set or aborted with; OK if it returned without one, CANCELLED
if it was cancelled, UNKNOWN if it raised anything else (what gRPC answers then).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from roleserve_core.stats import RpcStats

__all__ = ["StatsInterceptor"]

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"

_BUILDERS: dict[tuple[bool, bool], tuple[str, Callable[..., Handler]]] = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}
_CODES = {code.value[0]: code.name for code in grpc.StatusCode}


class StatsInterceptor(grpc.aio.ServerInterceptor):
    """Records every handled call's method, code and duration into ``stats``."""

    def __init__(self, stats: RpcStats) -> None:
        self.stats = stats

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        attribute, build = _BUILDERS[(handler.request_streaming, handler.response_streaming)]
        behaviour = getattr(handler, attribute)
        wrapped = (
            self._generator(method, behaviour)
            if inspect.isasyncgenfunction(behaviour)
            else self._coroutine(method, behaviour)
        )
        return build(
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _coroutine(
        self, method: str, behaviour: Callable[[Any, Context], Any]
    ) -> Callable[[Any, Context], Awaitable[Any]]:
        async def counted(request: Any, context: Context) -> Any:
            start, error = time.perf_counter(), None
            try:
                result = behaviour(request, context)
                return await result if inspect.isawaitable(result) else result
            except BaseException as exc:
                error = exc
                raise
            finally:
                self._record(method, context, error, start)

        return counted

    def _generator(
        self, method: str, behaviour: Callable[[Any, Context], AsyncIterator[Any]]
    ) -> Callable[[Any, Context], AsyncIterator[Any]]:
        async def counted(request: Any, context: Context) -> AsyncIterator[Any]:
            start, error = time.perf_counter(), None
            try:
                async for response in behaviour(request, context):
                    yield response
            except BaseException as exc:
                error = exc
                raise
            finally:
                self._record(method, context, error, start)

        return counted

    def _record(
        self, method: str, context: Context, error: BaseException | None, start: float
    ) -> None:
        self.stats.record(method, _code(context, error), time.perf_counter() - start)


def _code(context: Context, error: BaseException | None) -> str:
    """The name of the code the call ended with (see the module docstring)."""
    code: Any = None
    try:
        code = context.code()
    except Exception:  # a context of another implementation: judge by the error alone
        code = None
    if isinstance(code, grpc.StatusCode):
        name = code.name
    elif isinstance(code, int):
        name = _CODES.get(code, "UNKNOWN")
    else:
        name = "OK"
    if name != "OK" or error is None:
        return name
    if isinstance(error, asyncio.CancelledError):
        return "CANCELLED"
    return "UNKNOWN"
