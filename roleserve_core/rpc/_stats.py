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
from typing import Any

import grpc

from roleserve_core.rpc._handlers import Context, Handler, rewrapped
from roleserve_core.stats import RpcStats

__all__ = ["StatsInterceptor"]

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
        return rewrapped(
            handler,
            lambda behaviour: self._coroutine(method, behaviour),
            lambda behaviour: self._generator(method, behaviour),
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
