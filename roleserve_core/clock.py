"""Time, as the supervisor and workers see it: injectable so that tests never wait.

Everything in roleserve that waits for a *duration* (restart backoff, heartbeat intervals,
crash-loop windows) asks a ``Clock`` instead of calling ``anyio.sleep`` directly. Production
uses ``MonotonicClock``; tests use ``roleserve_core.testing.FakeClock``, which only moves
when the test advances it, so a 60 s backoff costs no real time and no test guesses how long
something takes.

``wall()`` is the same clock on the wall-clock scale (``time.time()``), for what is due at a
wall-clock time, such as a certificate's renewal: a worker sleeps on ``sleep`` until
``wall()`` reaches it, so the fake clock moves certificates' time as well.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio

__all__ = ["Clock", "MonotonicClock"]


class Clock(Protocol):
    """A source of monotonic time and of sleeps measured in it."""

    def now(self) -> float:
        """Seconds on a monotonic scale; only differences are meaningful."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (``time.time()``'s scale), moving as ``now()`` does."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until ``now()`` has advanced by at least ``seconds``; at once (a checkpoint)
        for ``seconds`` ≤ 0, a deadline already passed."""
        ...


class MonotonicClock:
    """The event loop's clock (``anyio.current_time``) and ``anyio.sleep``."""

    def now(self) -> float:
        """The event loop's monotonic time."""
        return anyio.current_time()

    def wall(self) -> float:
        """``time.time()``: the system's wall clock, which an operator may set."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """``anyio.sleep(seconds)``, and no wait for a deadline already passed.

        Callers sleep until a deadline (``deadline - now()``), which a task that ran late
        (a starved CPU, 100 local nodes on two cores) finds passed: anyio ≥ 4.12 refuses a
        negative delay with a ValueError, which crashed a node's supervisor.
        """
        await anyio.sleep(max(seconds, 0.0))
