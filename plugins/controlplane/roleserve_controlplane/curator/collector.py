"""Python's garbage collector while a curator leads: rare young collections, and the
long-lived objects kept out of every collection.

::

    leading ──▶ young threshold 700 → LEADER_YOUNG_THRESHOLD
            ──▶ every FREEZE_EVERY s: gc.freeze()  (what lives now: frozen, never scanned)
            ──▶ every THAW_EVERY s:   gc.unfreeze() (the next full collection frees the
                                                      cyclic garbage frozen meanwhile)
    term ends ──▶ unfrozen, the threshold as it was

A leader serving thousands of nodes holds millions of objects that live as long as it
leads (each node's record, stream, call and subscription), and one change sent to every
stream allocates tens of thousands that live a moment. Measured with 1,000 simulated
nodes (``benchmarks/curator_load.py``): 40 role changes caused 82 collections, 606 ms of
pauses in 6 s, one of them a full collection of 144 ms, which grows with the nodes (about
1.4 s at 10,000, more than any latency goal). The objects of a change are freed before
20,000 of them are alive at once, so with that threshold the young generation is almost
never collected (0 collections in the same run), and a frozen object is not scanned by
the full collections that remain. At 10,000 nodes one change leaves more behind until the
next (each stream's new pending dict and the future its reader awaits): with 20,000, 40
role changes caused 85 collections, 8.4 s of pauses in 90 s; with 100,000, none.

What freezing costs: cyclic garbage frozen before a full collection found it stays until
the next thaw (a closed stream's cycles, at most ``THAW_EVERY`` seconds' worth), and the
full collection after a thaw scans everything once. The whole process is concerned (the
collector is one per interpreter): a node's other workers keep running with the same
settings while its curator leads.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from roleserve_core import Clock

__all__ = ["FREEZE_EVERY", "LEADER_YOUNG_THRESHOLD", "THAW_EVERY", "leading_collector"]

LEADER_YOUNG_THRESHOLD = 100_000
"""Allocations (less deallocations) of tracked objects between young collections while
leading; Python's default is 700. A young collection then scans at most 100,000 objects
(a few milliseconds)."""
FREEZE_EVERY = 10.0
"""Seconds between freezes of every object alive: soon after thousands of nodes connect
(at a failover, all at once) their streams' objects are out of the full collections,
which took 1.7 s at 5,000 nodes while they connected."""
THAW_EVERY = 900.0
"""Seconds between thaws: the frozen objects go back to the oldest generation."""


class _Terms:
    """The ``leading_collector`` blocks open in this process (tests run several curators
    in one, whose terms may overlap), and the threshold found by the first of them."""

    open = 0
    found: tuple[int, int, int] = (700, 10, 10)


@asynccontextmanager
async def leading_collector(
    clock: Clock, freeze_every: float = FREEZE_EVERY, thaw_every: float = THAW_EVERY
) -> AsyncIterator[None]:
    """The collector tuned for leading for the block (see the module docstring), freezing
    and thawing on ``clock``; once the last of the blocks open ends, as the first found
    it, everything unfrozen."""
    if _Terms.open == 0:
        _Terms.found = gc.get_threshold()
    _Terms.open += 1
    gc.set_threshold(LEADER_YOUNG_THRESHOLD, *_Terms.found[1:])
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_freeze_and_thaw, clock, freeze_every, thaw_every)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
    finally:
        _Terms.open -= 1
        if _Terms.open == 0:
            gc.unfreeze()
            gc.set_threshold(*_Terms.found)


async def _freeze_and_thaw(clock: Clock, freeze_every: float, thaw_every: float) -> None:
    """Freeze every ``freeze_every`` seconds; thaw instead once ``thaw_every`` passed."""
    thawed = clock.now()
    while True:
        await clock.sleep(freeze_every)
        if clock.now() - thawed >= thaw_every:
            gc.unfreeze()
            thawed = clock.now()
        else:
            gc.freeze()
