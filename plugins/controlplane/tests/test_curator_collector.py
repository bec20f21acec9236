"""The garbage collector while a curator leads (``curator/collector.py``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import anyio
import pytest

from roleserve_controlplane.curator.collector import LEADER_YOUNG_THRESHOLD, leading_collector
from roleserve_core.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    """Whatever a test does, the process's collector is as it found it afterwards."""
    threshold = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


async def test_collects_young_objects_rarely_while_leading_and_as_before_after() -> None:
    before = gc.get_threshold()
    async with leading_collector(FakeClock()):
        assert gc.get_threshold() == (LEADER_YOUNG_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before


async def test_freezes_what_lives_then_thaws_it() -> None:
    clock = FakeClock()
    async with leading_collector(clock, freeze_every=10, thaw_every=25):
        await clock.wait_deadline(clock.now() + 10)
        assert gc.get_freeze_count() == 0
        clock.advance(10)
        await clock.wait_deadline(clock.now() + 10)
        assert gc.get_freeze_count() > 0  # 10 s: frozen
        clock.advance(10)
        await clock.wait_deadline(clock.now() + 10)
        assert gc.get_freeze_count() > 0  # 20 s: frozen again
        clock.advance(10)
        await clock.wait_deadline(clock.now() + 10)
        assert gc.get_freeze_count() == 0  # 30 s: thawed
        clock.advance(10)
        await clock.wait_deadline(clock.now() + 10)
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0  # the term's end thaws everything


async def test_overlapping_terms_restore_the_threshold_found_by_the_first() -> None:
    """Two curators of one test process: the first's term ends while the second leads."""
    before = gc.get_threshold()
    entered = [anyio.Event(), anyio.Event()]
    leave = [anyio.Event(), anyio.Event()]
    left = [anyio.Event(), anyio.Event()]

    async def term(number: int) -> None:
        async with leading_collector(FakeClock()):
            entered[number].set()
            await leave[number].wait()
        left[number].set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(term, 0)
        await entered[0].wait()
        tasks.start_soon(term, 1)
        await entered[1].wait()
        leave[0].set()
        await left[0].wait()
        assert gc.get_threshold()[0] == LEADER_YOUNG_THRESHOLD  # the second still leads
        leave[1].set()
        await left[1].wait()
    assert gc.get_threshold() == before
