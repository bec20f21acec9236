"""Event values: ``Value``, ``Watcher`` and ``ValueWatch``.

The first group translates Monogon's ``memory_test.go`` and ``example_test.go`` (of
``osbase/event/memory``); the rest checks, one behaviour per test, each sentence of
docs/architecture.md ("event.py: latest-value cells") and of the ``roleserve_core.event``
docstring. Tests synchronise on events, values and ``anyio.wait_all_tasks_blocked()``;
every wait is bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import inspect
import ipaddress
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel
import pytest

from roleserve_core.errors import ConcurrentGetError, EventError, WatcherClosedError
from roleserve_core.event import Value, ValueStatistics, ValueWatch, Watcher

pytestmark = pytest.mark.anyio

T = TypeVar("T")

TIMEOUT = 10.0
"""Bound on every wait: generous, only reached when a test is failing."""


@dataclass
class Outcome(Generic[T]):
    """What one background ``get()`` did: nothing yet, returned a value, or raised."""

    values: list[T] = field(default_factory=list)
    error: BaseException | None = None
    finished: anyio.Event = field(default_factory=anyio.Event)

    @property
    def pending(self) -> bool:
        return not self.finished.is_set()


async def get_into(
    watcher: Watcher[T], outcome: Outcome[T], filter: Callable[[T], bool] | None = None
) -> None:
    """One ``get()`` whose result or exception lands in ``outcome``."""
    try:
        outcome.values.append(await watcher.get(filter=filter))
    except (ConcurrentGetError, WatcherClosedError) as exc:
        outcome.error = exc
    finally:
        outcome.finished.set()


async def assert_get_blocks(watcher: Watcher[T]) -> None:
    """Assert that ``watcher.get()`` would wait: nothing is in its slot.

    The get runs in a scope that is cancelled once every task is blocked; a get that
    returned instead of waiting fails the test.
    """
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tasks:

            async def cancel_when_blocked() -> None:
                await anyio.wait_all_tasks_blocked()
                scope.cancel()

            tasks.start_soon(cancel_when_blocked)
            got = await watcher.get()
            pytest.fail(f"get() returned {got!r} instead of waiting for a new set")
    assert scope.cancelled_caught


# -- Monogon memory_test.go and example_test.go (osbase/event/memory) ----------------------


async def test_async() -> None:
    """TestAsync: a new watcher gets the current value; a late get sees only the newest."""
    value: Value[int] = Value()
    value.set(0)
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        assert await watcher.get() == 0
        for i in range(1, 101):
            value.set(i)
        assert await watcher.get() == 100
        await assert_get_blocks(watcher)


async def test_multiple_gets() -> None:
    """TestMultipleGets: of two concurrent gets, one fails at once, the other waits on."""
    value: Value[int] = Value()
    first: Outcome[int] = Outcome()
    second: Outcome[int] = Outcome()
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, first)
            tasks.start_soon(get_into, watcher, second)
            await anyio.wait_all_tasks_blocked()
            finished = [o for o in (first, second) if not o.pending]
            waiting = [o for o in (first, second) if o.pending]
            assert len(finished) == 1, "exactly one get must fail at once"
            assert len(waiting) == 1, "the other get must stay blocked"
            assert isinstance(finished[0].error, ConcurrentGetError)
            assert finished[0].values == []
            value.set(7)
        assert waiting[0].values == [7]
        assert waiting[0].error is None


async def test_concurrency() -> None:
    """TestConcurrency: 100 watchers at 100 paces all see increasing values ending on 100."""
    value: Value[int] = Value()
    seen: dict[int, list[int]] = {}

    async def consume(id: int, watcher: Watcher[int]) -> None:
        with watcher:
            received = seen[id] = []
            while not received or received[-1] != 100:
                received.append(await watcher.get())
                for _ in range(id):
                    await anyio.lowlevel.checkpoint()

    async def produce() -> None:
        for i in range(1, 101):
            value.set(i)
            await anyio.lowlevel.checkpoint()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tasks:
            for id in range(100):
                tasks.start_soon(consume, id, value.watch())
            tasks.start_soon(produce)

    assert sorted(seen) == list(range(100))
    for id, received in seen.items():
        assert received[-1] == 100, f"watcher {id} ended on {received[-1]}"
        assert all(a < b for a, b in itertools.pairwise(received)), (
            f"watcher {id} saw values out of order: {received}"
        )
    # The slowest consumer cannot keep up, so it skipped values, and never saw them late.
    assert len(seen[99]) < 100
    assert value.statistics().watchers == 0


async def test_canceling() -> None:
    """TestCanceling: a get cancelled while waiting leaves the watcher usable."""
    value: Value[int] = Value()
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tasks:
            with anyio.CancelScope() as scope:

                async def cancel_when_blocked() -> None:
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()

                tasks.start_soon(cancel_when_blocked)
                await watcher.get()
                pytest.fail("get() of an unset value returned")
            assert scope.cancelled_caught

            again: Outcome[int] = Outcome()
            tasks.start_soon(get_into, watcher, again)
            await anyio.wait_all_tasks_blocked()
            assert again.pending
            value.set(1)
        assert again.values == [1]


async def test_set_after_watch() -> None:
    """TestSetAfterWatch: a set between watch() and the first get replaces the old value."""
    value: Value[int] = Value()
    value.set(0)
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        value.set(1)
        assert await watcher.get() == 1
        await assert_get_blocks(watcher)


async def test_watchers_list() -> None:
    """TestWatchersList: closing and replacing a watcher 10 000 times leaks no slots."""
    value: Value[int] = Value()
    watchers = [value.watch() for _ in range(100)]
    closed: list[Watcher[int]] = []
    for _ in range(10_000):
        watchers[10].close()
        if len(closed) < 3:
            closed.append(watchers[10])
        watchers[10] = value.watch()
        assert value.statistics().watchers == 100
    value.set(1)
    assert value.statistics().watchers == 100
    with anyio.fail_after(TIMEOUT):
        for watcher in watchers:
            assert await watcher.get() == 1
        for watcher in closed:
            with pytest.raises(WatcherClosedError):
                await watcher.get()


async def test_example_value_full() -> None:
    """ExampleValue_full: a watcher skipping None sees each address a service sets, in order."""
    address: Value[ipaddress.IPv4Address | None] = Value()
    log: list[str] = []
    addresses = [ipaddress.IPv4Address("203.0.113.24"), ipaddress.IPv4Address("203.0.113.103")]

    async def network_service() -> None:
        log.append("service: starting, no address yet")
        address.set(None)
        for new in addresses:
            # Let the watcher take what it was given and wait again before the next step.
            await anyio.wait_all_tasks_blocked()
            log.append(f"service: got address {new}")
            address.set(new)

    async def address_watcher(started: anyio.Event) -> None:
        with address.watch() as watcher:
            started.set()
            for _ in addresses:
                got = await watcher.get(filter=lambda a: a is not None)
                log.append(f"watcher: address is {got}")

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tasks:
            started = anyio.Event()
            tasks.start_soon(address_watcher, started)
            await started.wait()
            tasks.start_soon(network_service)

    assert log == [
        "service: starting, no address yet",
        "service: got address 203.0.113.24",
        "watcher: address is 203.0.113.24",
        "service: got address 203.0.113.103",
        "watcher: address is 203.0.113.103",
    ]


# -- set() -----------------------------------------------------------------------------------


def test_set_is_a_plain_function() -> None:
    """set() cannot block: it is not a coroutine function, so it never awaits anything."""
    assert not inspect.iscoroutinefunction(Value.set)
    assert not inspect.iscoroutinefunction(Value.watch)


async def test_set_never_blocks_on_watchers_that_never_read() -> None:
    """1000 watchers that never read: sets return, and each watcher holds one slot only."""
    value: Value[int] = Value()
    watchers = [value.watch() for _ in range(1000)]
    for i in range(1000):
        value.set(i)
    assert value.statistics().sets == 1000
    with anyio.fail_after(TIMEOUT):
        for watcher in watchers[::100]:
            assert await watcher.get() == 999
            await assert_get_blocks(watcher)


async def test_every_set_notifies_even_of_an_equal_value() -> None:
    """No de-duplication: setting an equal value wakes a waiting get with the new object."""

    @dataclass(eq=True)
    class State:
        n: int

    value: Value[State] = Value()
    original = State(1)
    value.set(original)
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        assert await watcher.get() is original
        outcome: Outcome[State] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome)
            await anyio.wait_all_tasks_blocked()
            assert outcome.pending
            equal = State(1)
            value.set(equal)
        assert outcome.values[0] is equal
        value.set(original)  # the very same object notifies too
        assert await watcher.get() is original
    assert value.statistics().sets == 3


async def test_set_from_a_worker_thread_through_from_thread() -> None:
    """The module docstring's recipe: from a thread, set through anyio.from_thread.run_sync."""
    value: Value[int] = Value()
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        outcome: Outcome[int] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome)
            await anyio.wait_all_tasks_blocked()
            await anyio.to_thread.run_sync(lambda: anyio.from_thread.run_sync(value.set, 3))
        assert outcome.values == [3]


# -- get() -----------------------------------------------------------------------------------


async def test_first_get_returns_current_value_without_waiting() -> None:
    """A value set before watch() is what the first get returns, at once."""
    value: Value[str] = Value()
    value.set("before")
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        assert await watcher.get() == "before"


async def test_first_get_of_unset_value_waits_for_first_set() -> None:
    value: Value[str] = Value()
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        outcome: Outcome[str] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome)
            await anyio.wait_all_tasks_blocked()
            assert outcome.pending
            value.set("first")
        assert outcome.values == ["first"]


async def test_each_watcher_gets_the_current_value_once() -> None:
    """Two watchers each see the current value: a slot per watcher, not one shared."""
    value: Value[int] = Value()
    value.set(5)
    with value.watch() as a, value.watch() as b, anyio.fail_after(TIMEOUT):
        assert await a.get() == 5
        assert await b.get() == 5
        await assert_get_blocks(a)
        await assert_get_blocks(b)


async def test_later_get_waits_for_a_newer_set() -> None:
    value: Value[int] = Value()
    value.set(1)
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        assert await watcher.get() == 1
        outcome: Outcome[int] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome)
            await anyio.wait_all_tasks_blocked()
            assert outcome.pending, "a later get returned without a newer set"
            value.set(2)
        assert outcome.values == [2]


async def test_later_get_skips_intermediate_values() -> None:
    value: Value[int] = Value()
    value.set(0)
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        assert await watcher.get() == 0
        value.set(1)
        value.set(2)
        value.set(3)
        assert await watcher.get() == 3
        await assert_get_blocks(watcher)


async def test_filter_skips_rejected_values_and_returns_an_accepted_one() -> None:
    value: Value[int] = Value()
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        outcome: Outcome[int] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome, lambda n: n % 2 == 0)
            for odd in (1, 3, 5):
                await anyio.wait_all_tasks_blocked()
                value.set(odd)
            await anyio.wait_all_tasks_blocked()
            assert outcome.pending, "get returned a value its filter rejected"
            value.set(6)
        assert outcome.values == [6]


async def test_filter_consumes_rejected_values() -> None:
    """A value the filter rejected is gone: a later get without filter does not see it."""
    value: Value[int] = Value()
    value.set(1)
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        outcome: Outcome[int] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome, lambda n: n > 1)
            await anyio.wait_all_tasks_blocked()
            assert outcome.pending
            value.set(2)
        assert outcome.values == [2]

        value.set(3)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tasks:

                async def cancel_when_blocked() -> None:
                    await anyio.wait_all_tasks_blocked()
                    scope.cancel()

                tasks.start_soon(cancel_when_blocked)
                await watcher.get(filter=lambda n: n > 100)
        assert scope.cancelled_caught
        await assert_get_blocks(watcher)  # 3 was consumed by the rejecting get


async def test_filter_sees_values_in_order() -> None:
    value: Value[int] = Value()
    offered: list[int] = []

    def accept_four(n: int) -> bool:
        offered.append(n)
        return n == 4

    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        outcome: Outcome[int] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome, accept_four)
            for n in range(1, 5):
                await anyio.wait_all_tasks_blocked()
                value.set(n)
        assert outcome.values == [4]
        assert offered == [1, 2, 3, 4]


async def test_second_concurrent_get_raises_at_once() -> None:
    """A get while one is pending raises without waiting, and disturbs the pending one."""
    value: Value[int] = Value()
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        pending: Outcome[int] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, pending)
            await anyio.wait_all_tasks_blocked()
            for _ in range(2):
                with pytest.raises(ConcurrentGetError, match="one watcher per consumer"):
                    await watcher.get()
            assert pending.pending
            value.set(9)
        assert pending.values == [9]
        # Once the pending get returned, the watcher takes a get again.
        value.set(10)
        assert await watcher.get() == 10


async def test_cancelled_get_leaves_the_watcher_usable() -> None:
    value: Value[int] = Value()
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        with anyio.CancelScope() as scope:
            scope.cancel()
            await watcher.get()
        assert scope.cancelled_caught
        value.set(4)
        assert await watcher.get() == 4


async def test_cancelled_get_leaves_a_waiting_value_in_the_slot() -> None:
    """A get cancelled before it could return keeps the waiting value for the next get."""
    value: Value[int] = Value()
    value.set(1)
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        with anyio.CancelScope() as scope:
            scope.cancel()
            got = await watcher.get()
            pytest.fail(f"get() in a cancelled scope returned {got!r}")
        assert scope.cancelled_caught
        assert await watcher.get() == 1


async def test_watcher_can_be_handed_to_another_task() -> None:
    value: Value[int] = Value()
    value.set(1)
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        assert await watcher.get() == 1
        outcome: Outcome[int] = Outcome()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome)
            await anyio.wait_all_tasks_blocked()
            value.set(2)
        assert outcome.values == [2]
        value.set(3)
        assert await watcher.get() == 3


async def test_none_is_a_value_distinct_from_unset() -> None:
    value: Value[int | None] = Value()
    assert not value.is_set()
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        await assert_get_blocks(watcher)
        value.set(None)
        assert value.is_set()
        assert value.get_nowait() is None
        assert value.statistics().is_set
        assert await watcher.get() is None
    with value.watch() as late, anyio.fail_after(TIMEOUT):
        assert await late.get() is None


# -- async for, close() and with --------------------------------------------------------------


async def test_async_for_iterates_until_the_watcher_is_closed() -> None:
    value: Value[int] = Value()
    seen: list[int] = []
    watcher = value.watch()

    async def consume() -> None:
        async for n in watcher:
            seen.append(n)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(consume)
            for n in (1, 2, 3):
                await anyio.wait_all_tasks_blocked()
                value.set(n)
            await anyio.wait_all_tasks_blocked()
            watcher.close()
    assert seen == [1, 2, 3]


async def test_async_for_ends_when_closed_from_its_body() -> None:
    value: Value[int] = Value()
    value.set(1)
    seen: list[int] = []
    with anyio.fail_after(TIMEOUT):
        watcher = value.watch()
        async for n in watcher:
            seen.append(n)
            value.set(n + 1)
            if n == 3:
                watcher.close()
    assert seen == [1, 2, 3]


async def test_close_wakes_a_pending_get_with_watcher_closed_error() -> None:
    value: Value[int] = Value()
    watcher = value.watch()
    outcome: Outcome[int] = Outcome()
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(get_into, watcher, outcome)
            await anyio.wait_all_tasks_blocked()
            watcher.close()
    assert isinstance(outcome.error, WatcherClosedError)
    assert outcome.values == []


async def test_get_on_a_closed_watcher_raises_even_with_a_value_waiting() -> None:
    """Unlike Monogon, which would return the value left in the mailbox, or block."""
    value: Value[int] = Value()
    value.set(1)
    watcher = value.watch()
    watcher.close()
    with anyio.fail_after(TIMEOUT), pytest.raises(WatcherClosedError):
        await watcher.get()


async def test_close_is_idempotent() -> None:
    value: Value[int] = Value()
    watcher = value.watch()
    other = value.watch()
    closed = [watcher.closed]
    watcher.close()
    closed.append(watcher.closed)
    watcher.close()
    closed.append(watcher.closed)
    assert closed == [False, True, True]
    assert value.statistics().watchers == 1
    value.set(1)
    with anyio.fail_after(TIMEOUT):
        assert await other.get() == 1
        with pytest.raises(WatcherClosedError):
            await watcher.get()


async def test_closed_watcher_stops_receiving_sets() -> None:
    value: Value[int] = Value()
    watcher = value.watch()
    assert value.statistics().watchers == 1
    watcher.close()
    assert value.statistics().watchers == 0
    value.set(1)  # must not touch the closed watcher
    assert value.statistics().watchers == 0
    with anyio.fail_after(TIMEOUT), pytest.raises(WatcherClosedError):
        await watcher.get()


def test_with_block_closes_the_watcher() -> None:
    value: Value[int] = Value()
    with value.watch() as watcher:
        closed = [watcher.closed]
        assert value.statistics().watchers == 1
    closed.append(watcher.closed)
    assert closed == [False, True]
    assert value.statistics().watchers == 0


def test_with_block_closes_the_watcher_on_error() -> None:
    value: Value[int] = Value()
    with pytest.raises(RuntimeError, match="boom"), value.watch() as watcher:
        raise RuntimeError("boom")
    assert watcher.closed
    assert value.statistics().watchers == 0


def test_errors_are_event_errors() -> None:
    """Callers can catch every misuse of a watcher as one ``EventError``."""
    assert issubclass(ConcurrentGetError, EventError)
    assert issubclass(WatcherClosedError, EventError)


# -- ValueWatch, get_nowait and statistics ---------------------------------------------------


async def test_value_watch_is_read_only() -> None:
    value: Value[int] = Value()
    view = value.read_only()
    assert isinstance(view, ValueWatch)
    assert not hasattr(view, "set")
    value.set(3)
    assert view.get_nowait() == 3
    assert view.statistics() == value.statistics()
    with view.watch() as watcher, anyio.fail_after(TIMEOUT):
        assert value.statistics().watchers == 1
        assert await watcher.get() == 3
        value.set(4)
        assert await watcher.get() == 4


async def test_get_nowait_returns_current_value_without_consuming() -> None:
    value: Value[str] = Value()
    with pytest.raises(LookupError, match="not set"):
        value.get_nowait()
    with pytest.raises(LookupError):
        value.read_only().get_nowait()
    value.set("a")
    with value.watch() as watcher, anyio.fail_after(TIMEOUT):
        value.set("b")
        assert value.get_nowait() == "b"
        assert value.get_nowait() == "b"
        assert await watcher.get() == "b"  # get_nowait consumed nothing


def test_statistics_of_a_new_value() -> None:
    assert Value[int]().statistics() == ValueStatistics(
        is_set=False, sets=0, watchers=0, last_set=None
    )


def test_statistics_count_sets_watchers_and_time_of_last_set() -> None:
    value: Value[int] = Value()
    a = value.watch()
    value.watch()
    before = time.time()
    value.set(1)
    value.set(1)
    value.set(2)
    after = time.time()
    stats = value.statistics()
    assert stats.is_set
    assert stats.sets == 3
    assert stats.watchers == 2
    assert stats.last_set is not None
    assert before <= stats.last_set <= after
    a.close()
    assert value.statistics().watchers == 1


def test_repr_shows_value_and_watchers() -> None:
    value: Value[int] = Value()
    assert repr(value) == "Value(<unset>, watchers=0)"
    value.watch()
    value.set(42)
    assert repr(value) == "Value(42, watchers=1)"
