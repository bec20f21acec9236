"""Retrying inside a runnable (roleserve_core.Retry, roleserve_core.retry): the supervisor's
backoff delays, slept on a clock the test drives."""

from __future__ import annotations

import random

import anyio
import pytest

import roleserve_core
from roleserve_core import BackoffPolicy, MonotonicClock, Retry, retry
from roleserve_core.testing import FakeClock

pytestmark = pytest.mark.anyio

DOUBLING = BackoffPolicy(initial=1.0, multiplier=2.0, maximum=3.0, jitter=0.0)


class Flaky:
    """An attempt that raises each of ``errors`` in turn, then returns ``"done"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


async def test_retry_sleeps_the_backoff_on_the_clock_between_attempts() -> None:
    clock = FakeClock()
    attempt = Flaky(ValueError("1"), ValueError("2"), ValueError("3"))
    got: list[str] = []
    steps = []
    async with anyio.create_task_group() as tasks:

        async def run() -> None:
            got.append(await retry(attempt, retry_on=ValueError, backoff=DOUBLING, clock=clock))

        tasks.start_soon(run)
        for _ in range(3):
            steps.append(await clock.advance_to_next())
    assert (got, steps, attempt.calls) == (["done"], [1.0, 2.0, 3.0], 4)


async def test_retry_returns_at_once_when_the_first_attempt_succeeds() -> None:
    clock = FakeClock()
    assert await retry(Flaky(), retry_on=ValueError, clock=clock) == "done"
    assert clock.now() == 1000.0


async def test_retry_raises_at_once_what_it_does_not_retry_on() -> None:
    attempt = Flaky(KeyError("not this"))
    with pytest.raises(KeyError, match="not this"):
        await retry(attempt, retry_on=ValueError, clock=FakeClock())
    assert attempt.calls == 1


async def test_retry_when_picks_which_of_the_errors_are_retried() -> None:
    clock = FakeClock()
    attempt = Flaky(ValueError("transient"), ValueError("for good"))
    raised: list[BaseException] = []
    async with anyio.create_task_group() as tasks:

        async def run() -> None:
            try:
                await retry(
                    attempt,
                    retry_on=(ValueError, KeyError),
                    when=lambda exc: "transient" in str(exc),
                    backoff=DOUBLING,
                    clock=clock,
                )
            except ValueError as exc:
                raised.append(exc)

        tasks.start_soon(run)
        assert await clock.advance_to_next() == 1.0
    assert [str(exc) for exc in raised] == ["for good"]
    assert attempt.calls == 2


async def test_retry_is_bounded_by_the_callers_cancel_scope() -> None:
    clock = FakeClock()
    attempt = Flaky(*[ValueError(str(n)) for n in range(100)])
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tasks:

            async def run() -> None:
                await retry(attempt, retry_on=ValueError, backoff=DOUBLING, clock=clock)

            tasks.start_soon(run)
            await clock.wait_sleepers(1)
            scope.cancel()
    assert (attempt.calls, clock.sleepers()) == (1, 0)


async def test_retry_waits_grow_to_the_maximum_and_reset_to_the_first() -> None:
    clock = FakeClock()
    pauses = Retry(DOUBLING, clock=clock)
    slept = []
    async with anyio.create_task_group() as tasks:
        for expected in (1.0, 2.0, 3.0, 3.0):
            assert pauses.delay == expected
            tasks.start_soon(pauses.wait)
            slept.append(await clock.advance_to_next())
        pauses.reset()
        assert pauses.delay == 1.0
    assert slept == [1.0, 2.0, 3.0, 3.0]


async def test_retry_delay_is_drawn_in_advance_so_a_log_line_can_say_it() -> None:
    """With jitter the next delay is random; ``delay`` is the one ``wait`` then sleeps."""
    clock = FakeClock()
    pauses = Retry(BackoffPolicy(jitter=0.5, rng=random.Random(7)), clock=clock)
    for _ in range(3):
        said = pauses.delay
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(pauses.wait)
            await clock.wait_deadline(clock.now() + said)
            clock.advance(said)


def test_retry_next_delay_takes_a_pause_without_sleeping() -> None:
    pauses = Retry(DOUBLING, clock=FakeClock())
    assert [pauses.next_delay() for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]


def test_retry_defaults_to_the_restart_backoff_on_the_event_loop() -> None:
    pauses = Retry()
    policy = BackoffPolicy()
    spread = policy.initial * policy.jitter
    assert policy.initial - spread <= pauses.delay <= policy.initial + spread
    assert isinstance(pauses.clock, MonotonicClock)


def test_retry_is_the_plugin_api() -> None:
    from roleserve_core import supervisor

    assert (roleserve_core.Retry, roleserve_core.retry) == (supervisor.Retry, supervisor.retry)
