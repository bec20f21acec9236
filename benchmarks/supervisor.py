"""Supervisor: starting a tree of 10,000 runnables, and the cost of a restart.

Run: ``./dev sync && .venv/bin/python benchmarks/supervisor.py``. Each figure is printed
next to a baseline measured in the same run, and the ratio of the two:

(d1) a tree of 10,000 runnables (root → 100 groups → 100 children each) from start until
     every runnable signalled healthy; baseline: 10,000 bare tasks started in one task
     group, until every one has run.
(d2) a restart with zero backoff: from a runnable's failure until its next run signalled
     healthy; baseline: cancelling a bare task and starting a new one, until it has run.
"""

from __future__ import annotations

import argparse
import time

import anyio
from _report import print_comparison, summarise

from roleserve_core.supervisor import BackoffPolicy, RunContext, Runnable, State, Supervisor


class HealthyCounter:
    """A state observer that sets an event once ``target`` runnables became healthy."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.reached = anyio.Event()

    def __call__(self, dn: str, old: State | None, new: State) -> None:
        if new is State.HEALTHY:
            self.count += 1
            if self.count == self.target:
                self.reached.set()


async def leaf(ctx: RunContext) -> None:
    ctx.signal_healthy()
    await anyio.sleep_forever()


def branch(width: int) -> Runnable:
    async def run(ctx: RunContext) -> None:
        ctx.run_group({f"leaf{i}": leaf for i in range(width)})
        ctx.signal_healthy()
        await anyio.sleep_forever()

    return run


async def start_tree(groups: int, width: int) -> float:
    """Seconds from entering the supervisor until the whole tree is healthy."""
    group = branch(width)

    async def root(ctx: RunContext) -> None:
        ctx.run_group({f"group{i}": group for i in range(groups)})
        ctx.signal_healthy()
        await anyio.sleep_forever()

    counter = HealthyCounter(1 + groups + groups * width)
    start = time.perf_counter()
    async with Supervisor(root, observers=[counter]):
        await counter.reached.wait()
        return time.perf_counter() - start


async def start_tasks(count: int) -> float:
    """Seconds to start ``count`` bare tasks until each has run."""
    remaining = [count]
    done = anyio.Event()

    async def task() -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            done.set()
        await anyio.sleep_forever()

    start = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(count):
            tasks.start_soon(task)
        await done.wait()
        elapsed = time.perf_counter() - start
        tasks.cancel_scope.cancel()
    return elapsed


async def restart_supervised(rounds: int) -> list[float]:
    """Latency from failure to healthy again, with zero backoff."""
    trigger: list[anyio.Event] = [anyio.Event()]
    counter = HealthyCounter(0)

    async def flaky(ctx: RunContext) -> None:
        ctx.signal_healthy()
        await trigger[0].wait()
        raise RuntimeError("requested failure")

    async def root(ctx: RunContext) -> None:
        ctx.run("flaky", flaky)
        ctx.signal_healthy()
        await anyio.sleep_forever()

    samples: list[float] = []
    backoff = BackoffPolicy(initial=0.0, jitter=0.0)
    async with Supervisor(root, backoff=backoff, observers=[counter]) as supervisor:
        await supervisor.wait_state("root.flaky", State.HEALTHY)
        supervisor.logtree.set_level(100)  # keep the failure logs out of the measurement
        for _ in range(rounds):
            counter.reached = anyio.Event()
            counter.target = counter.count + 1
            start = time.perf_counter()
            trigger[0].set()
            trigger[0] = anyio.Event()
            await counter.reached.wait()
            samples.append(time.perf_counter() - start)
    return samples


async def restart_bare(rounds: int) -> list[float]:
    """Latency of cancelling a task and starting a new one, until the new one has run."""
    samples: list[float] = []
    async with anyio.create_task_group() as tasks:
        started = [anyio.Event()]

        async def task(scope: anyio.CancelScope) -> None:
            with scope:
                started[0].set()
                await anyio.sleep_forever()

        scope = anyio.CancelScope()
        tasks.start_soon(task, scope)
        await started[0].wait()
        for _ in range(rounds):
            start = time.perf_counter()
            scope.cancel()
            scope = anyio.CancelScope()
            started[0] = anyio.Event()
            tasks.start_soon(task, scope)
            await started[0].wait()
            samples.append(time.perf_counter() - start)
        scope.cancel()
    return samples


async def main(groups: int, width: int, repeats: int, rounds: int) -> None:
    """Run both benchmarks and print the figures."""
    total = 1 + groups + groups * width
    tree = [await start_tree(groups, width) for _ in range(repeats)]
    bare = [await start_tasks(total) for _ in range(repeats)]
    print_comparison(
        f"(d1) start a tree of {total:,} runnables until all are healthy ({repeats} runs)",
        summarise(tree),
        summarise(bare),
        f"{total:,} bare tasks in one task group",
    )
    print(f"  per runnable: {summarise(tree).median / total * 1e6:.1f} µs")
    print_comparison(
        f"(d2) restart with zero backoff, failure → healthy ({rounds} restarts)",
        summarise(await restart_supervised(rounds)),
        summarise(await restart_bare(rounds)),
        "cancel a bare task and start a new one",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--width", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2000)
    options = parser.parse_args()
    anyio.run(
        main, options.groups, options.width, options.repeats, options.rounds, backend="asyncio"
    )
