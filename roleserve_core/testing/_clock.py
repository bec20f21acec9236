"""A clock that moves only when the test says so."""

from __future__ import annotations

import heapq
import itertools
import time

import anyio

from roleserve_core.event import Value
from roleserve_core.testing._wait import DEFAULT_TIMEOUT

__all__ = ["FakeClock"]

NOT_ON_THIS_CLOCK = (
    "A worker that waits with anyio.sleep is not one of them: wait with ctx.clock.sleep, "
    "and retry with retry/Retry given clock=ctx.clock"
)
"""What a timeout of a wait for sleepers says is the usual cause."""


class FakeClock:
    """A ``Clock`` for tests: ``sleep`` waits until ``advance`` moves time past its deadline.

    A 60 s backoff costs no real time, and a test can wait until a task is asleep
    (``wait_sleepers``) before it advances, instead of guessing with a real sleep::

        await clock.wait_sleepers(1)   # the restart is now waiting out its backoff
        clock.advance(clock.next_deadline() - clock.now())
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._wall_offset = time.time() - start
        """``wall()`` starts at the real time of creation (certificates issued then are
        valid), and moves only with ``advance``."""
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._order = itertools.count()
        self._count: Value[int] = Value()
        self._count.set(0)

    def now(self) -> float:
        """The fake time."""
        return self._now

    def wall(self) -> float:
        """The fake time on the wall-clock scale: the real time at creation, plus every
        ``advance`` since."""
        return self._now + self._wall_offset

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock is advanced by at least ``seconds``."""
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        entry = (self._now + seconds, next(self._order), anyio.Event())
        heapq.heappush(self._sleepers, entry)
        self._count.set(len(self._sleepers))
        try:
            await entry[2].wait()
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)
                heapq.heapify(self._sleepers)
            self._count.set(len(self._sleepers))

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, event = heapq.heappop(self._sleepers)
            event.set()
        self._count.set(len(self._sleepers))

    def next_deadline(self) -> float | None:
        """The earliest deadline of a sleeper, or None if nobody sleeps."""
        return self._sleepers[0][0] if self._sleepers else None

    def sleepers(self) -> int:
        """How many tasks are asleep on this clock."""
        return len(self._sleepers)

    async def wait_sleepers(self, count: int, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Wait until at least ``count`` tasks are asleep on this clock.

        :raises TimeoutError: after ``timeout`` real seconds, saying how many sleep; the
            usual cause is a worker that waits with ``anyio.sleep`` (which this clock
            never sees) instead of ``ctx.clock.sleep``, or retries with ``retry``/``Retry``
            without ``clock=ctx.clock``.
        """
        with anyio.move_on_after(timeout), self._count.watch() as watcher:
            await watcher.get(filter=lambda n: n >= count)
            return
        raise TimeoutError(
            f"waited {timeout:g} s for {count} task(s) asleep on the fake clock; "
            f"{self.sleepers()} are. {NOT_ON_THIS_CLOCK}"
        )

    async def wait_deadline(self, deadline: float, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Wait until a task sleeps until ``deadline`` exactly (``now() + interval`` when
        it went to sleep): the one sleeper a test cares about, whatever else sleeps.

        :raises TimeoutError: after ``timeout`` real seconds, naming the deadlines there are.
        """

        def asleep(_: int) -> bool:
            return any(abs(entry[0] - deadline) < 1e-9 for entry in self._sleepers)

        with anyio.move_on_after(timeout), self._count.watch() as watcher:
            await watcher.get(filter=asleep)
            return
        there = sorted(entry[0] - self._now for entry in self._sleepers)
        raise TimeoutError(
            f"waited {timeout:g} s for a task asleep on the fake clock until "
            f"now + {deadline - self._now:g} s; the sleepers wake in {there} s. "
            f"{NOT_ON_THIS_CLOCK}"
        )

    async def wake_sleeper(self, seconds: float, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Wait until a task sleeps ``seconds`` from now (a worker's interval, a retry),
        then advance the clock by ``seconds``: that wait is over, and nothing later wakes::

            await fake_clock.wake_sleeper(interval)   # the next heartbeat goes out

        :raises TimeoutError: as ``wait_deadline``.
        """
        await self.wait_deadline(self._now + seconds, timeout=timeout)
        self.advance(seconds)

    async def advance_to_next(self) -> float:
        """Wait for a sleeper, then advance exactly to its deadline; returns the step."""
        await self.wait_sleepers(1)
        deadline = self.next_deadline()
        assert deadline is not None
        step = max(0.0, deadline - self._now)
        self.advance(step)
        return step
