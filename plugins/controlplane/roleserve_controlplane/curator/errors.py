"""How the curator's handlers refuse: one exception, mapped to a gRPC status in one place.

::

    RefusedError(code, message)     a deliberate refusal: the status and message the client gets
    RequestLimitError          INVALID_ARGUMENT   (a field beyond roleserve_core.limits)
    NodeNotFoundError          NOT_FOUND
    UpdateConflictError        ABORTED       (the record kept changing; the client may retry)
    LeadershipLostError        UNAVAILABLE   (the client should find the new leader)
    QuorumError                FAILED_PRECONDITION
    EtcdRequestError           UNAVAILABLE   (etcd did not answer)
    PrefixesExhaustedError     RESOURCE_EXHAUSTED (no free prefix of the cluster network)
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc

from roleserve_controlplane.consensus import EtcdRequestError, LeadershipLostError, QuorumError
from roleserve_controlplane.curator.prefixes import PrefixesExhaustedError
from roleserve_controlplane.curator.state import NodeNotFoundError, UpdateConflictError
from roleserve_core import RefusedError, RequestLimitError

__all__ = ["RefusedError", "handled"]

log = logging.getLogger("roleserve.curator")

F = TypeVar("F", bound=Callable[..., Any])


def _status_of(error: Exception) -> tuple[grpc.StatusCode, str] | None:
    if isinstance(error, RefusedError):
        return error.code, str(error)
    if isinstance(error, RequestLimitError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(error)
    if isinstance(error, NodeNotFoundError):
        return grpc.StatusCode.NOT_FOUND, str(error)
    if isinstance(error, UpdateConflictError):
        log.warning("gave up an update: %s", error)
        return grpc.StatusCode.ABORTED, f"{error}; nothing was written: retry"
    if isinstance(error, LeadershipLostError):
        return grpc.StatusCode.UNAVAILABLE, f"{error}; ask CuratorLocal for the new leader"
    if isinstance(error, PrefixesExhaustedError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)
    if isinstance(error, QuorumError):
        return grpc.StatusCode.FAILED_PRECONDITION, str(error)
    if isinstance(error, EtcdRequestError):
        log.warning("etcd request failed: %s", error)
        return grpc.StatusCode.UNAVAILABLE, "the cluster's store did not answer; retry"
    return None


def handled(method: F) -> F:
    """Turn the curator's exceptions raised by ``method`` into statuses (see above)."""
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                async for response in method(self, request, context):
                    yield response
            except Exception as error:
                status = _status_of(error)
                if status is None:
                    raise
                await context.abort(*status)

        return stream  # type: ignore[return-value]

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: Any) -> Any:
        try:
            return await method(self, request, context)
        except Exception as error:
            status = _status_of(error)
            if status is None:
                raise
            await context.abort(*status)

    return unary  # type: ignore[return-value]
