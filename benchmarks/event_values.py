"""Event values: wake-up latency, fan-out to 10,000 watchers, memory per watcher.

Run: ``./dev sync && .venv/bin/python benchmarks/event_values.py``. Each figure is printed
next to a baseline measured in the same run, and the ratio of the two:

(a) set → get wake-up of one watcher, as a ping-pong between two tasks; baseline: the same
    ping-pong over a pair of bare ``anyio.Event`` objects.
(b) one ``set`` that wakes 10,000 watchers blocked in ``get``, until all have returned;
    baseline: 10,000 tasks blocked on one ``anyio.Event``, until all have returned.
(c) memory per idle watcher (created, not reading), and per watcher blocked in ``get``
    inside its own task; baselines: a bare ``anyio.Event``, and a task blocked on one.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from _report import print_comparison, summarise

from roleserve_core.event import Value


async def ping_pong_value(rounds: int) -> list[float]:
    """Latency of set → get between two tasks over two Values."""
    ping: Value[int] = Value()
    pong: Value[int] = Value()
    samples: list[float] = []

    async def responder() -> None:
        with ping.watch() as watcher:
            async for n in watcher:
                pong.set(n)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(responder)
        await anyio.wait_all_tasks_blocked()
        with pong.watch() as replies:
            for n in range(rounds):
                start = time.perf_counter()
                ping.set(n)
                await replies.get()
                samples.append(time.perf_counter() - start)
        tasks.cancel_scope.cancel()
    return samples


async def ping_pong_event(rounds: int) -> list[float]:
    """The same ping-pong over fresh anyio.Events (an Event cannot be reset)."""
    samples: list[float] = []
    ping = [anyio.Event()]
    pong = [anyio.Event()]

    async def responder() -> None:
        while True:
            await ping[0].wait()
            ping[0] = anyio.Event()
            pong[0].set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(responder)
        await anyio.wait_all_tasks_blocked()
        for _ in range(rounds):
            start = time.perf_counter()
            ping[0].set()
            await pong[0].wait()
            pong[0] = anyio.Event()
            samples.append(time.perf_counter() - start)
        tasks.cancel_scope.cancel()
    return samples


async def fan_out_value(watchers: int) -> float:
    """Seconds from one set until all ``watchers`` blocked gets have returned."""
    value: Value[int] = Value()
    remaining = [watchers]
    done = anyio.Event()

    async def watch() -> None:
        with value.watch() as watcher:
            await watcher.get()
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    async with anyio.create_task_group() as tasks:
        for _ in range(watchers):
            tasks.start_soon(watch)
        await anyio.wait_all_tasks_blocked()
        start = time.perf_counter()
        value.set(1)
        await done.wait()
        elapsed = time.perf_counter() - start
    return elapsed


async def fan_out_event(waiters: int) -> float:
    """Seconds from one Event.set until all ``waiters`` tasks have returned."""
    event = anyio.Event()
    remaining = [waiters]
    done = anyio.Event()

    async def wait() -> None:
        await event.wait()
        remaining[0] -= 1
        if remaining[0] == 0:
            done.set()

    async with anyio.create_task_group() as tasks:
        for _ in range(waiters):
            tasks.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        start = time.perf_counter()
        event.set()
        await done.wait()
        elapsed = time.perf_counter() - start
    return elapsed


def bytes_per_object(make: Callable[[], object], count: int) -> float:
    """Average bytes allocated per object made by ``make`` and kept alive."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [make() for _ in range(count)]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return (after - before) / count


async def bytes_per_blocked_task(
    block: Callable[[], Coroutine[Any, Any, Any]], count: int
) -> float:
    """Average bytes per task blocked in ``block()``, task included."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with anyio.create_task_group() as tasks:
        for _ in range(count):
            tasks.start_soon(block)
        await anyio.wait_all_tasks_blocked()
        after = tracemalloc.get_traced_memory()[0]
        tasks.cancel_scope.cancel()
    tracemalloc.stop()
    return (after - before) / count


async def main(rounds: int, watchers: int, repeats: int) -> None:
    """Run every benchmark and print the figures."""
    await ping_pong_value(200)  # warm up
    await ping_pong_event(200)
    print_comparison(
        f"(a) set → get wake-up of one watcher ({rounds} round trips)",
        summarise(await ping_pong_value(rounds)),
        summarise(await ping_pong_event(rounds)),
        "anyio.Event ping-pong",
    )
    value_times = [await fan_out_value(watchers) for _ in range(repeats)]
    event_times = [await fan_out_event(watchers) for _ in range(repeats)]
    print_comparison(
        f"(b) one set waking {watchers:,} blocked watchers ({repeats} runs)",
        summarise(value_times),
        summarise(event_times),
        f"one anyio.Event with {watchers:,} waiters",
    )

    value: Value[int] = Value()
    value.set(0)
    idle = bytes_per_object(value.watch, watchers)
    event = bytes_per_object(anyio.Event, watchers)
    print("(c) memory per watcher")
    ratio = idle / event
    print(
        f"  idle watcher          {idle:8.0f} B  (anyio.Event: {event:.0f} B, ratio {ratio:.2f}×)"
    )

    blocked_value: Value[int] = Value()

    async def blocked_get() -> None:
        with blocked_value.watch() as watcher:
            await watcher.get()

    shared = anyio.Event()
    in_get = await bytes_per_blocked_task(blocked_get, watchers)
    in_wait = await bytes_per_blocked_task(shared.wait, watchers)
    print(
        f"  task blocked in get() {in_get:8.0f} B  (task blocked on an anyio.Event: "
        f"{in_wait:.0f} B, ratio {in_get / in_wait:.2f}×)"
    )
    many = Value[int]()
    with many.watch() as slow:
        for n in range(100_000):
            many.set(n)
        assert await slow.get() == 99_999
    print("  a watcher that missed 100,000 sets holds one value: O(1) memory per watcher")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000, help="ping-pong round trips")
    parser.add_argument("--watchers", type=int, default=10_000, help="watchers for (b), (c)")
    parser.add_argument("--repeats", type=int, default=7, help="runs of (b)")
    options = parser.parse_args()
    anyio.run(main, options.rounds, options.watchers, options.repeats, backend="asyncio")
