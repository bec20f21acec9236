"""Restart backoff (roleserve_core.supervisor.Backoff): growth, cap, jitter, reset, policy."""

from __future__ import annotations

import random
from typing import Any

import pytest

from roleserve_core.supervisor import Backoff, BackoffPolicy


class FixedRandom(random.Random):
    """A jitter source that always draws ``value``."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


def delays(policy: BackoffPolicy, count: int) -> list[float]:
    backoff = Backoff(policy)
    return [backoff.next_delay() for _ in range(count)]


def test_defaults_are_monogons() -> None:
    policy = BackoffPolicy()
    assert (policy.initial, policy.multiplier, policy.maximum, policy.jitter) == (
        0.5,
        1.5,
        60.0,
        0.5,
    )


def test_interval_grows_by_the_multiplier_up_to_the_cap() -> None:
    got = delays(BackoffPolicy(jitter=0.0), 16)

    expected = [min(0.5 * 1.5**n, 60.0) for n in range(16)]
    assert got == expected
    assert got[:5] == [0.5, 0.75, 1.125, 1.6875, 2.53125]
    assert got[-4:] == [60.0] * 4


def test_other_parameters_are_honoured() -> None:
    assert delays(BackoffPolicy(initial=1.0, multiplier=2.0, maximum=5.0, jitter=0.0), 5) == [
        1.0,
        2.0,
        4.0,
        5.0,
        5.0,
    ]
    assert delays(BackoffPolicy(initial=0.25, multiplier=1.0, jitter=0.0), 3) == [0.25] * 3


@pytest.mark.parametrize(
    ("draw", "factor"),
    [(0.0, 0.5), (0.5, 1.0), (0.75, 1.25)],
    ids=["lowest", "middle", "upper-quarter"],
)
def test_jitter_maps_the_draw_onto_plus_minus_jitter(draw: float, factor: float) -> None:
    """A delay is interval × (1 - jitter + 2 × jitter × draw)."""
    got = delays(BackoffPolicy(jitter=0.5, rng=FixedRandom(draw)), 3)
    assert got == [interval * factor for interval in (0.5, 0.75, 1.125)]


def test_jitter_stays_within_bounds_and_varies() -> None:
    policy = BackoffPolicy(jitter=0.5, maximum=4.0, rng=random.Random(1234))
    backoff = Backoff(policy)
    drawn: list[float] = []
    for _ in range(200):
        interval = backoff.interval
        delay = backoff.next_delay()
        assert interval * 0.5 <= delay <= interval * 1.5
        drawn.append(delay / interval)
    assert max(drawn) - min(drawn) > 0.5  # the delays really are spread
    assert backoff.interval == 4.0  # jitter does not affect the interval itself


def test_seeded_rng_gives_reproducible_delays() -> None:
    first = delays(BackoffPolicy(rng=random.Random(7)), 10)
    second = delays(BackoffPolicy(rng=random.Random(7)), 10)
    assert first == second


def test_reset_returns_to_the_initial_interval() -> None:
    backoff = Backoff(BackoffPolicy(jitter=0.0))
    for _ in range(6):
        backoff.next_delay()
    assert backoff.interval == 0.5 * 1.5**6

    backoff.reset()

    assert backoff.interval == 0.5
    assert [backoff.next_delay(), backoff.next_delay()] == [0.5, 0.75]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"initial": -0.1}, "must not be negative"),
        ({"maximum": -1.0}, "must not be negative"),
        ({"multiplier": 0.9}, "multiplier must be at least 1"),
        ({"jitter": -0.1}, "jitter must be between 0 and 1"),
        ({"jitter": 1.5}, "jitter must be between 0 and 1"),
    ],
    ids=["negative-initial", "negative-maximum", "shrinking", "negative-jitter", "big-jitter"],
)
def test_policy_rejects_bad_parameters(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackoffPolicy(**options)


@pytest.mark.parametrize(
    "options",
    [{"initial": 0.0}, {"multiplier": 1.0}, {"jitter": 0.0}, {"jitter": 1.0}],
    ids=["zero-initial", "constant", "no-jitter", "full-jitter"],
)
def test_policy_accepts_boundary_parameters(options: dict[str, Any]) -> None:
    delay = Backoff(BackoffPolicy(**options)).next_delay()
    assert delay >= 0.0


def test_policy_compares_without_its_rng() -> None:
    assert BackoffPolicy(rng=random.Random(1)) == BackoffPolicy(rng=random.Random(2))
