"""Node health from heartbeats: the grace after a leader starts, timeouts, the interval."""

from __future__ import annotations

from typing import TypeAlias

import pytest

from roleserve_controlplane.curator import DEFAULT_HEARTBEAT_INTERVAL, Heartbeats
from roleserve_controlplane.curator.health import Connection
from roleserve_core import common_pb2, management_pb2
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


# -- one process per node identity ------------------------------------------------------------

FIRST = Connection("192.0.2.1:40000", "first")
SECOND = Connection("192.0.2.2:40000", "second")


def test_a_second_process_is_refused_while_the_first_holds_the_node() -> None:
    _, heartbeats = _leader()
    assert heartbeats.connect("node", FIRST) is None
    heartbeats.beat("node")
    assert heartbeats.connect("node", SECOND) is FIRST
    assert heartbeats.refuse_other("node", SECOND) is FIRST
    assert heartbeats.refuse_other("node", FIRST) is None
    assert heartbeats.conflict("node") == (
        "connected from 192.0.2.1:40000; a second process from 192.0.2.2:40000 was refused "
        "0s ago: two processes share this node's identity"
    )
    assert heartbeats.conflict("other") == ""


def test_the_same_process_reconnecting_from_another_port_takes_its_node_back() -> None:
    _, heartbeats = _leader()
    heartbeats.connect("node", FIRST)
    reconnected = Connection("192.0.2.1:40001", "first")
    assert heartbeats.connect("node", reconnected) is None
    heartbeats.disconnect("node", FIRST)  # the old stream's end, seen late
    assert heartbeats.holder("node") is reconnected
    assert heartbeats.conflict("node") == ""


def test_without_instance_ids_the_peer_address_tells_processes_apart() -> None:
    _, heartbeats = _leader()
    old = Connection("192.0.2.1:40000", "")
    assert heartbeats.connect("node", old) is None
    assert heartbeats.connect("node", Connection("192.0.2.1:40000", "")) is None
    assert heartbeats.connect("node", Connection("192.0.2.1:40001", "")) is not None


def test_the_node_is_free_once_its_stream_ends_or_it_is_silent_for_a_timeout() -> None:
    clock, heartbeats = _leader()
    heartbeats.connect("node", FIRST)
    heartbeats.disconnect("node", FIRST)
    assert heartbeats.connect("node", SECOND) is None  # the stream ended: free

    clock.advance(heartbeats.timeout)  # SECOND connected, never beat: held one timeout
    assert heartbeats.connect("node", FIRST) is SECOND
    clock.advance(0.25)  # silent for more: a machine that died without closing its stream
    assert heartbeats.holder("node") is None
    assert heartbeats.conflict("node") == ""
    assert heartbeats.connect("node", FIRST) is None


def test_a_conflict_is_shown_for_one_timeout_after_the_last_refusal() -> None:
    clock, heartbeats = _leader()
    heartbeats.connect("node", FIRST)
    heartbeats.connect("node", SECOND)
    clock.advance(heartbeats.timeout)
    heartbeats.beat("node")
    assert "refused 15s ago" in heartbeats.conflict("node")
    clock.advance(0.25)
    assert heartbeats.conflict("node") == ""  # the second process gave up
