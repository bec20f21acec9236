"""Observable, latest-value cells: the way roleserve shares changing state.

The state of a node (its roles, its connection to the curator, its address, ...) lives in
``Value`` cells. One party sets a value; any number of others watch it::

    producer ──set()──▶ Value ──▶ Watcher (1 slot) ──get()──▶ consumer A
                              └──▶ Watcher (1 slot) ──get()──▶ consumer B

Why not queues or channels? A consumer of node state wants *the current state*, not a
history of every intermediate one. A queue per consumer grows without bound when the
consumer is slow, and a bounded one makes the producer block or drop the wrong item.
A latest-value cell costs one slot per watcher however many sets happen, never blocks the
producer, and a consumer that wakes up late sees exactly the newest state. That is the
semantics of Monogon's ``memory.Value``, which this module follows:

- ``set()`` never blocks and costs O(watchers). Every set notifies, even of an equal value:
  there is no de-duplication, because equality of arbitrary state is not ours to define.
- The first ``get()`` of a watcher returns the value current when the watcher was created
  (or a newer one set since), or waits for the first set if the value was never set.
- Every later ``get()`` waits for a set newer than the last one returned. Values set in
  between are skipped; the values one watcher sees follow the order of the sets.
- ``get(filter=...)`` consumes and discards values the filter rejects.
- A second ``get()`` on a watcher while one is pending raises ``ConcurrentGetError`` at
  once: a watcher has one consumer. Use one watcher per consumer.
- A cancelled ``get()`` leaves the watcher usable; the slot is untouched.

Deliberate departures from Monogon, both for clearer errors: ``close()`` is idempotent
(Go's panics on a second close), and a ``get()`` on a closed watcher raises
``WatcherClosedError`` instead of blocking until cancelled; closing a watcher wakes a
pending ``get()`` with that error, and ends an ``async for`` loop over it.

Values are not thread-safe: call ``set()`` and ``watch()`` from the event loop thread
(from a worker thread, use ``anyio.from_thread.run_sync(value.set, x)``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar, final

import anyio
import anyio.abc

from roleserve_core.errors import ConcurrentGetError, WatcherClosedError

__all__ = ["Combined", "Value", "ValueStatistics", "ValueWatch", "Watcher"]

T = TypeVar("T")


class _Unset:
    """Marks an empty slot or a value never set; distinct from ``None``, which is a value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


@dataclass(frozen=True, slots=True)
class ValueStatistics:
    """A snapshot of one value, for introspection (``roleserve ctl values``) and tests."""

    is_set: bool
    """Whether ``set()`` has been called at least once."""
    sets: int
    """How many times ``set()`` has been called."""
    watchers: int
    """Open watchers."""
    last_set: float | None
    """Wall-clock time (``time.time()``) of the last ``set()``, or None if never set."""


class ValueWatch(Generic[T]):
    """The read side of a value: what a reader gets, so that it cannot ``set()``.

    Mirrors Monogon's ``ValueWatch``: a read-only view exposes only ``watch()``.
    """

    __slots__ = ("_value",)

    def __init__(self, value: Value[T]) -> None:
        self._value = value

    def watch(self) -> Watcher[T]:
        """Create a watcher of the underlying value; see ``Value.watch``."""
        return self._value.watch()

    def get_nowait(self) -> T:
        """The current value without waiting; see ``Value.get_nowait``."""
        return self._value.get_nowait()

    def statistics(self) -> ValueStatistics:
        """See ``Value.statistics``."""
        return self._value.statistics()


@final
class Value(Generic[T]):
    """A latest-value cell: ``set()`` by one owner, watched by any number of readers.

    A ``Value`` is ready to use once constructed and starts unset. See the module docstring
    for the exact semantics.
    """

    __slots__ = ("__weakref__", "_last_set", "_sets", "_value", "_watchers")

    def __init__(self) -> None:
        self._value: T | _Unset = _UNSET
        # A dict, not a list: insertion-ordered (sets notify in watch order) and O(1)
        # removal on close, so the watcher collection never holds closed watchers and
        # needs none of the compaction Monogon's slice does.
        self._watchers: dict[Watcher[T], None] = {}
        self._sets = 0
        self._last_set: float | None = None

    def set(self, value: T) -> None:
        """Store ``value`` and hand it to every open watcher. Never blocks; O(watchers).

        A watcher whose slot still holds an unread value has that value replaced.
        """
        self._value = value
        self._sets += 1
        self._last_set = time.time()
        for watcher in self._watchers:
            watcher._deliver(value)

    def watch(self) -> Watcher[T]:
        """Create a watcher. If the value is set, the watcher's first get returns it."""
        watcher = Watcher(self)
        self._watchers[watcher] = None
        if not isinstance(self._value, _Unset):
            watcher._deliver(self._value)
        return watcher

    def get_nowait(self) -> T:
        """The current value, without waiting or consuming anything.

        :raises LookupError: if the value was never set.
        """
        if isinstance(self._value, _Unset):
            raise LookupError("value is not set")
        return self._value

    def is_set(self) -> bool:
        """Whether the value has been set at least once."""
        return not isinstance(self._value, _Unset)

    def read_only(self) -> ValueWatch[T]:
        """A read-only view of this value, to hand to readers."""
        return ValueWatch(self)

    def statistics(self) -> ValueStatistics:
        """A frozen snapshot of this value's counters."""
        return ValueStatistics(
            is_set=self.is_set(),
            sets=self._sets,
            watchers=len(self._watchers),
            last_set=self._last_set,
        )

    def _forget(self, watcher: Watcher[T]) -> None:
        self._watchers.pop(watcher, None)

    def __repr__(self) -> str:
        return f"Value({self._value!r}, watchers={len(self._watchers)})"


@final
class Watcher(Generic[T]):
    """One consumer's view of a ``Value``: a one-slot mailbox holding the newest unread set.

    Use it as a ``with`` block (it closes on exit) and read it with ``await get()`` or
    ``async for``. A watcher has one consumer: it is not safe to ``get()`` from two tasks
    at once, but it may be handed from one task to another.
    """

    __slots__ = ("__weakref__", "_closed", "_getting", "_slot", "_source", "_wakeup")

    def __init__(self, source: Value[T]) -> None:
        self._source: Value[T] | None = source
        self._slot: T | _Unset = _UNSET
        # A bare asyncio future, not an anyio.Event: a get() waits on exactly one waker,
        # and a future costs about half of an Event to create, set and await
        # (benchmarks/event_values.py). roleserve runs on anyio's asyncio backend only.
        self._wakeup: asyncio.Future[None] | None = None
        self._getting = False
        self._closed = False

    def _deliver(self, value: T) -> None:
        self._slot = value
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def get(self, filter: Callable[[T], bool] | None = None) -> T:
        """Wait for a value newer than the last one returned, and return it.

        :param filter: if given, values for which it returns False are consumed and
            discarded, and ``get`` keeps waiting.
        :raises anyio.get_cancelled_exc_class(): if the enclosing scope is cancelled, even
            when a value is waiting; the value then stays for the next ``get``.
        :raises ConcurrentGetError: if another ``get`` on this watcher is pending.
        :raises WatcherClosedError: if the watcher is closed, or is closed while waiting.
        """
        if self._getting:
            raise ConcurrentGetError(
                "get() called concurrently on one watcher; use one watcher per consumer"
            )
        # A cancellation point even when a value is waiting: without it, a get() in an
        # already-cancelled scope would consume the slot and return, and its caller, being
        # cancelled, would lose that value at its next await. Cancelled here, the slot is
        # untouched and the next get() returns it. (Does not yield unless cancelled.) With
        # an empty slot the wait below is the cancellation point, and the check is skipped:
        # it costs a third of a wake-up (benchmarks/event_values.py).
        if not isinstance(self._slot, _Unset):
            await anyio.lowlevel.checkpoint_if_cancelled()
        self._getting = True
        try:
            while True:
                if self._closed:
                    raise WatcherClosedError("get() on a closed watcher")
                if isinstance(self._slot, _Unset):
                    self._wakeup = asyncio.get_running_loop().create_future()
                    await self._wakeup
                    continue
                value: T = self._slot
                self._slot = _UNSET
                if filter is None or filter(value):
                    return value
        finally:
            self._getting = False
            self._wakeup = None

    def close(self) -> None:
        """Stop receiving sets. Idempotent; a pending ``get`` raises ``WatcherClosedError``."""
        if self._closed:
            return
        self._closed = True
        if self._source is not None:
            self._source._forget(self)
            self._source = None
        self._slot = _UNSET
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has been called."""
        return self._closed

    def __enter__(self) -> Watcher[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        """The next value; the iteration ends when the watcher is closed."""
        try:
            return await self.get()
        except WatcherClosedError:
            raise StopAsyncIteration from None


class Combined:
    """The latest values of several sources, as one tuple: ``async with Combined(a, b) as
    both: first = await both.get()``.

    For workers that fold several values into one decision. ``get()`` returns the current
    tuple at once the first time (None for a source never set), then waits until any source
    is set again; changes in between coalesce, as with a single watcher.
    """

    def __init__(self, *sources: Value[Any] | ValueWatch[Any]) -> None:
        self._sources = sources
        self._latest: list[Any] = [None] * len(sources)
        self._changes: Value[int] = Value()
        self._count = 0
        self._tasks: anyio.abc.TaskGroup | None = None
        self._watcher: Watcher[int] | None = None

    async def __aenter__(self) -> Combined:
        for index, source in enumerate(self._sources):
            if source.statistics().is_set:
                self._latest[index] = source.get_nowait()
        self._changes.set(self._count)
        self._watcher = self._changes.watch()
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        for index, source in enumerate(self._sources):
            self._tasks.start_soon(self._follow, index, source)
        return self

    async def _follow(self, index: int, source: Value[Any] | ValueWatch[Any]) -> None:
        with source.watch() as watcher:
            first = True
            async for value in watcher:
                if first and value is self._latest[index]:
                    first = False  # the value read at entry, delivered again
                    continue
                first = False
                self._latest[index] = value
                self._count += 1
                self._changes.set(self._count)

    async def get(self) -> tuple[Any, ...]:
        """The latest values: now the first time, then once any of them changes."""
        assert self._watcher is not None, "use Combined as an async context manager"
        await self._watcher.get()
        return tuple(self._latest)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tasks is not None
        self._tasks.cancel_scope.cancel()
        if self._watcher is not None:
            self._watcher.close()
        return await self._tasks.__aexit__(exc_type, exc, tb)
