"""The event loop of the kit's async tests: one that stays open a little after its test.

anyio gives each test an event loop of its own and closes it when the test ends. grpc.aio
has one completion queue poller for the process, which hands each event to the loop of the
call it belongs to. The last events of a test's calls (a cancelled stream's final status)
can come just after that test's loop closed; grpc then calls ``call_soon_threadsafe`` on a
closed loop, and the ``RuntimeError: Event loop is closed`` lands in whichever test runs
next, failing it. A ``LingeringEventLoop`` is only really closed once ``LINGER`` newer ones
were: a late event then queues a callback that never runs, which harms nothing.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

__all__ = ["LINGER", "LingeringEventLoop", "LingeringEventLoopPolicy", "close_lingering_loops"]

LINGER = 2
"""How many newer loops must be closed before a loop really closes."""


class LingeringEventLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``close()`` takes effect ``LINGER`` closes later."""

    closing: ClassVar[list[LingeringEventLoop]] = []
    """Loops asked to close, oldest first, not closed yet."""

    def close(self) -> None:
        if self.is_running():
            super().close()  # raises, as asyncio's own does
        LingeringEventLoop.closing.append(self)
        while len(LingeringEventLoop.closing) > LINGER:
            oldest = LingeringEventLoop.closing.pop(0)
            asyncio.SelectorEventLoop.close(oldest)


class LingeringEventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """Makes every new event loop a ``LingeringEventLoop``: anyio's test runner and any
    ``anyio.run`` in a test get theirs from the policy."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return LingeringEventLoop()


def close_lingering_loops() -> None:
    """Really close every loop still lingering (at the end of the session)."""
    while LingeringEventLoop.closing:
        asyncio.SelectorEventLoop.close(LingeringEventLoop.closing.pop(0))
