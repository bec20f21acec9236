"""The test kit's fake clock: sleeps end only when the test advances time past them."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from roleserve_core.testing import DEFAULT_TIMEOUT, FakeClock

pytestmark = pytest.mark.anyio


def sleeper(
    clock: FakeClock, seconds: float, woke: list[float]
) -> Callable[[], Coroutine[Any, Any, None]]:
    """An async function that sleeps ``seconds`` on ``clock``, then appends ``seconds``."""

    async def run() -> None:
        await clock.sleep(seconds)
        woke.append(seconds)

    return run


async def start_sleepers(
    tasks: TaskGroup, clock: FakeClock, durations: list[float], woke: list[float]
) -> None:
    """Start one sleeper per duration and wait until they all sleep."""
    for seconds in durations:
        tasks.start_soon(sleeper(clock, seconds, woke))
    await clock.wait_sleepers(clock.sleepers() + len(durations))


def test_time_starts_where_told_and_moves_only_on_advance() -> None:
    clock = FakeClock(start=5.0)
    assert clock.now() == 5.0
    clock.advance(2.5)
    assert clock.now() == 7.5
    assert (clock.sleepers(), clock.next_deadline()) == (0, None)


def test_negative_advance_raises_and_keeps_time() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1.0)
    assert clock.now() == 1000.0


async def test_sleep_ends_once_advance_reaches_its_deadline() -> None:
    clock = FakeClock()
    woke: list[float] = []
    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with anyio.create_task_group() as tasks:
            await start_sleepers(tasks, clock, [5.0], woke)
            assert clock.next_deadline() == 1005.0

            clock.advance(4.5)
            await anyio.wait_all_tasks_blocked()
            assert (woke, clock.sleepers()) == ([], 1)

            clock.advance(0.5)  # exactly the deadline is enough
            assert clock.sleepers() == 0
    assert (woke, clock.now()) == ([5.0], 1005.0)


@pytest.mark.parametrize("seconds", [0.0, -1.0])
async def test_sleep_of_no_time_returns_at_once(seconds: float) -> None:
    clock = FakeClock()
    with anyio.fail_after(DEFAULT_TIMEOUT):
        await clock.sleep(seconds)
    assert (clock.now(), clock.sleepers()) == (1000.0, 0)


async def test_sleepers_wake_in_deadline_order() -> None:
    clock = FakeClock()
    woke: list[float] = []
    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with anyio.create_task_group() as tasks:
            await start_sleepers(tasks, clock, [3.0, 1.0, 2.0], woke)
            clock.advance(2.0)
            await anyio.wait_all_tasks_blocked()
            assert (woke, clock.sleepers(), clock.next_deadline()) == ([1.0, 2.0], 1, 1003.0)
            clock.advance(10.0)
    assert woke == [1.0, 2.0, 3.0]


async def test_wait_sleepers_waits_for_the_count() -> None:
    clock = FakeClock()
    reached = anyio.Event()
    woke: list[float] = []

    async def wait_for_two() -> None:
        await clock.wait_sleepers(2)
        reached.set()

    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait_for_two)
            await start_sleepers(tasks, clock, [1.0], woke)
            await anyio.wait_all_tasks_blocked()
            assert not reached.is_set()

            await start_sleepers(tasks, clock, [1.0], woke)
            await reached.wait()
            clock.advance(1.0)


async def test_advance_to_next_steps_exactly_to_the_earliest_deadline() -> None:
    clock = FakeClock()
    woke: list[float] = []
    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with anyio.create_task_group() as tasks:
            await start_sleepers(tasks, clock, [2.5, 4.0], woke)

            assert await clock.advance_to_next() == 2.5
            assert (clock.now(), clock.sleepers()) == (1002.5, 1)

            assert await clock.advance_to_next() == 1.5
    assert woke == [2.5, 4.0]


async def test_advance_to_next_waits_for_a_sleeper() -> None:
    clock = FakeClock()
    steps: list[float] = []

    async def advance() -> None:
        steps.append(await clock.advance_to_next())

    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(advance)
            await anyio.wait_all_tasks_blocked()
            assert steps == []
            await clock.sleep(3.0)  # woken by the advancing task
    assert (steps, clock.now()) == ([3.0], 1003.0)


async def test_cancelled_sleeper_is_removed() -> None:
    clock = FakeClock()
    woke: list[float] = []
    middle = anyio.CancelScope()

    async def cancellable() -> None:
        with middle:
            await clock.sleep(2.0)

    with anyio.fail_after(DEFAULT_TIMEOUT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cancellable)
            await start_sleepers(tasks, clock, [1.0, 3.0], woke)
            await clock.wait_sleepers(3)

            middle.cancel()
            await anyio.wait_all_tasks_blocked()
            assert (clock.sleepers(), clock.next_deadline()) == (2, 1001.0)

            clock.advance(2.0)  # past the cancelled deadline: nobody else is due
            await anyio.wait_all_tasks_blocked()
            assert (woke, clock.sleepers(), clock.next_deadline()) == ([1.0], 1, 1003.0)
            clock.advance(1.0)
    assert woke == [1.0, 3.0]


async def test_wake_sleeper_ends_the_one_wait_of_that_length_and_nothing_later() -> None:
    clock = FakeClock()
    woke: list[float] = []
    async with anyio.create_task_group() as tasks:
        await start_sleepers(tasks, clock, [5.0, 3.0], woke)
        with anyio.fail_after(DEFAULT_TIMEOUT):
            await clock.wake_sleeper(3.0)
        await anyio.wait_all_tasks_blocked()  # the woken one has run on
        assert (woke, clock.now(), clock.next_deadline()) == ([3.0], 1003.0, 1005.0)
        tasks.cancel_scope.cancel()


async def test_a_wait_for_sleepers_that_never_come_fails_saying_why() -> None:
    """A worker that waits with anyio.sleep never sleeps on the fake clock: the kit fails
    with what it waited for and the likely cause, instead of hanging the test."""
    clock = FakeClock()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(anyio.sleep, 3600)  # as such a worker does
        with pytest.raises(TimeoutError, match=r"for 1 task\(s\) asleep on the fake clock; 0 are"):
            await clock.wait_sleepers(1, timeout=0.05)
        with pytest.raises(TimeoutError, match=r"until now \+ 5 s; .* wait with ctx.clock.sleep"):
            await clock.wake_sleeper(5.0, timeout=0.05)
        assert clock.now() == 1000.0  # nothing advanced
        tasks.cancel_scope.cancel()
