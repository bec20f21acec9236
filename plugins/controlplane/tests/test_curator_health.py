"""Node health from heartbeats: the grace after a leader starts, timeouts, the interval."""

from __future__ import annotations

from typing import TypeAlias

import pytest

from roleserve_controlplane.curator import DEFAULT_HEARTBEAT_INTERVAL, Heartbeats
from roleserve_core.proto import common_pb2, management_pb2
from roleserve_core.testing import FakeClock

Health = management_pb2.Node.Health
HealthValue: TypeAlias = management_pb2.Node.Health.ValueType
UP = common_pb2.NODE_STATE_UP
INTERVALS = [0.5, DEFAULT_HEARTBEAT_INTERVAL, 20.0]
"""Intervals whose multiples are exact in binary, so the boundaries are exact too."""


def _leader(interval: float = DEFAULT_HEARTBEAT_INTERVAL) -> tuple[FakeClock, Heartbeats]:
    """Heartbeats of a leader that started long after the clock did: the grace counts from
    the leader's start."""
    clock = FakeClock()
    clock.advance(3600.0)
    return clock, Heartbeats(clock, interval)


def test_the_default_timeout_is_three_intervals_of_five_seconds() -> None:
    heartbeats = Heartbeats(FakeClock())
    assert (heartbeats.interval, heartbeats.timeout) == (5.0, 15.0)


@pytest.mark.parametrize(
    "state",
    [
        common_pb2.NODE_STATE_NEW,
        common_pb2.NODE_STATE_STANDBY,
        common_pb2.NODE_STATE_DECOMMISSIONED,
        common_pb2.NODE_STATE_INVALID,
    ],
)
def test_a_node_that_is_not_up_has_unknown_health(
    state: common_pb2.NodeState.ValueType,
) -> None:
    clock, heartbeats = _leader()
    clock.advance(heartbeats.timeout * 2)  # past the grace: an UP node would time out
    heartbeats.beat("beating")  # and an UP node that beats would be healthy
    assert heartbeats.health("beating", state) == Health.HEALTH_UNKNOWN
    assert heartbeats.health("silent", state) == Health.HEALTH_UNKNOWN


@pytest.mark.parametrize("interval", INTERVALS)
@pytest.mark.parametrize(
    ("timeouts", "extra", "expected"),
    [
        (0, 0.0, Health.HEALTH_UNKNOWN),
        (1, -0.25, Health.HEALTH_UNKNOWN),
        (1, 0.0, Health.HEARTBEAT_TIMEOUT),  # the grace is one timeout, its end excluded
        (5, 0.0, Health.HEARTBEAT_TIMEOUT),
    ],
)
def test_a_silent_up_node_is_unknown_during_the_grace_then_timed_out(
    interval: float, timeouts: int, extra: float, expected: HealthValue
) -> None:
    clock, heartbeats = _leader(interval)
    clock.advance(heartbeats.timeout * timeouts + extra)
    assert heartbeats.health("silent", UP) == expected


@pytest.mark.parametrize("interval", INTERVALS)
@pytest.mark.parametrize(
    ("timeouts", "extra", "expected"),
    [
        (0, 0.0, Health.HEALTHY),
        (1, 0.0, Health.HEALTHY),  # exactly one timeout is not "more than" one
        (1, 0.25, Health.HEARTBEAT_TIMEOUT),
    ],
)
def test_an_up_node_is_healthy_until_more_than_three_intervals_passed_since_its_beat(
    interval: float, timeouts: int, extra: float, expected: HealthValue
) -> None:
    clock, heartbeats = _leader(interval)
    clock.advance(heartbeats.timeout * 10)  # long after the grace
    heartbeats.beat("node")
    clock.advance(3 * interval * timeouts + extra)
    assert heartbeats.health("node", UP) == expected


def test_a_beat_during_the_grace_counts_from_then() -> None:
    clock, heartbeats = _leader()
    clock.advance(heartbeats.timeout / 2)
    heartbeats.beat("node")
    clock.advance(heartbeats.timeout)  # the grace is over; the beat is exactly one timeout old
    assert heartbeats.health("node", UP) == Health.HEALTHY
    assert heartbeats.health("other", UP) == Health.HEARTBEAT_TIMEOUT
    clock.advance(0.25)
    assert heartbeats.health("node", UP) == Health.HEARTBEAT_TIMEOUT


def test_since_last_counts_from_the_latest_beat_of_each_node() -> None:
    clock, heartbeats = _leader()
    assert heartbeats.since_last("node") is None
    heartbeats.beat("node")
    clock.advance(2.5)
    heartbeats.beat("other")
    clock.advance(1.0)
    assert (heartbeats.since_last("node"), heartbeats.since_last("other")) == (3.5, 1.0)
    heartbeats.beat("node")
    assert heartbeats.since_last("node") == 0.0
    clock.advance(heartbeats.timeout * 2)  # a timed-out node keeps its age
    assert heartbeats.since_last("node") == heartbeats.timeout * 2
