"""Unary calls that anyio can cancel (grpc issue 43502).

When a task awaiting a grpc.aio unary call is cancelled, grpc swallows the
``CancelledError`` it receives and raises a new one without its message. anyio recognises
its own cancellations by that message, so the cancellation of a cancel scope around the call
escapes the scope as a foreign cancellation, and ``move_on_after`` or a task group's cancel
can tear down far more than they should.

``unary(call)`` awaits the call and, when it raises ``CancelledError``, gives anyio the
chance to raise its own cancellation instead, at ``checkpoint_if_cancelled``. A cancellation
that came from outside anyio (none of its scopes is cancelled) is re-raised unchanged.

Calls through ``secure_channel`` (and every stub built on it) go through ``unary`` already;
the wrapper needs calling by hand only for calls on other channels.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from typing import Any, Generic, TypeVar

import anyio

from roleserve_core._public import publish

__all__ = ["CancellationSafeCall", "unary"]

T = TypeVar("T")


async def unary(call: Awaitable[T]) -> T:
    """Await a unary grpc.aio call so that an anyio cancellation stays anyio's."""
    try:
        return await call
    except asyncio.CancelledError:
        await anyio.lowlevel.checkpoint_if_cancelled()
        raise


class CancellationSafeCall(Generic[T]):
    """A grpc.aio call whose ``await`` goes through ``unary``; everything else delegates."""

    __slots__ = ("_call",)

    def __init__(self, call: Awaitable[T]) -> None:
        self._call = call

    def __await__(self) -> Generator[Any, None, T]:
        return unary(self._call).__await__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.rpc", globals(), __all__)
