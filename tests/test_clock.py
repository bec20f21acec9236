"""The node's clock: a sleep until a deadline that has already passed returns at once."""

from __future__ import annotations

import anyio
import pytest

from roleserve_core import MonotonicClock
from roleserve_core.clock import Clock
from roleserve_core.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("clock", [MonotonicClock(), FakeClock()], ids=["monotonic", "fake"])
async def test_a_deadline_already_passed_is_no_wait(clock: Clock) -> None:
    """A task that ran late computes ``deadline - now()`` < 0 (the supervisor's restart
    delay did, on 100 local nodes sharing two cores): it runs on, it does not raise (anyio
    refuses a negative delay) and does not wait."""
    with anyio.fail_after(1):
        await clock.sleep(-0.5)
        await clock.sleep(0.0)
