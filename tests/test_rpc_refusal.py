"""How a response stream ends when its caller is refused during the call (a node
decommissioned, a user revoked): ``rpc._server._until_refused``, driven directly on asyncio
(grpc.aio's loop), so that the order of events within one turn of the loop is the test's.

The rule: a response the handler gave before the refusal is sent; none given after it is,
even one that became ready in the same turn of the loop; the call ends with the refusal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from roleserve_core.rpc._server import Metadata, _until_refused

pytestmark = pytest.mark.anyio

REFUSAL = ("revoked", (("roleserve-revoked", "1"),))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class AbortedError(Exception):
    """What grpc.aio's ``context.abort`` raises, as the fake context raises it."""


class Context:
    """The one method ``_until_refused`` calls on a servicer context."""

    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str, Metadata] | None = None

    async def abort(self, code: grpc.StatusCode, details: str, metadata: Metadata) -> None:
        self.aborted = (code, details, metadata)
        raise AbortedError


async def sent(responses: AsyncIterator[Any], refusal: asyncio.Future[Any]) -> list[Any]:
    """What the call sends before it ends; asserts it ends with the refusal."""
    context = Context()

    async def guard() -> tuple[str, Metadata]:
        return await refusal  # type: ignore[no-any-return]

    got: list[Any] = []

    async def take() -> None:
        async for response in _until_refused(responses, guard, context):  # type: ignore[arg-type]
            got.append(response)

    with pytest.raises(AbortedError):
        await take()
    assert context.aborted == (grpc.StatusCode.PERMISSION_DENIED, *REFUSAL)
    return got


async def test_responses_given_before_the_refusal_are_sent() -> None:
    loop = asyncio.get_running_loop()
    refusal: asyncio.Future[Any] = loop.create_future()
    waiting: asyncio.Future[None] = loop.create_future()

    async def responses() -> AsyncIterator[str]:
        yield "first"
        yield "second"
        refusal.set_result(REFUSAL)  # while the handler waits for its next change
        await waiting
        yield "never"

    assert await sent(responses(), refusal) == ["first", "second"]


async def test_a_response_ready_in_the_turn_of_the_refusal_is_not_sent() -> None:
    """The refusal and the handler's next response complete in one turn, the refusal
    first: the handler's task takes its response before the guard's callback could cancel
    its wait, and the response is still not sent."""
    loop = asyncio.get_running_loop()
    refusal: asyncio.Future[Any] = loop.create_future()
    change: asyncio.Future[str] = loop.create_future()

    async def responses() -> AsyncIterator[str]:
        yield "before"

        def both() -> None:
            refusal.set_result(REFUSAL)
            change.set_result("after")

        loop.call_soon(both)
        yield await change

    assert await sent(responses(), refusal) == ["before"]


async def test_a_handler_that_swallows_the_cancellation_sends_nothing_more() -> None:
    """Against the rule that a handler lets cancellation through: its next response is
    not sent, the call ends with the refusal, and its task is not left cancelling."""
    loop = asyncio.get_running_loop()
    refusal: asyncio.Future[Any] = loop.create_future()
    cancelled = []

    async def responses() -> AsyncIterator[str]:
        yield "before"
        loop.call_soon(refusal.set_result, REFUSAL)
        try:
            await loop.create_future()  # a change that never comes
        except asyncio.CancelledError:
            cancelled.append(True)  # and carries on, as it should not
        yield "after"

    assert await sent(responses(), refusal) == ["before"]
    assert cancelled == [True]
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_cancelled_call_is_cancelled_not_refused() -> None:
    """The call itself cancelled (the client went away) while the guard has not returned:
    the cancellation goes on, and no refusal is sent."""
    loop = asyncio.get_running_loop()
    refusal: asyncio.Future[Any] = loop.create_future()
    context = Context()

    async def guard() -> tuple[str, Metadata]:
        return await refusal  # type: ignore[no-any-return]

    waiting = asyncio.Event()

    async def responses() -> AsyncIterator[str]:
        yield "before"
        waiting.set()
        await loop.create_future()
        yield "never"

    async def call() -> list[str]:
        return [r async for r in _until_refused(responses(), guard, context)]  # type: ignore[arg-type]

    task = asyncio.ensure_future(call())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert context.aborted is None
