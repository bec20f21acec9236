"""Restart backoff: exponential with jitter, as cenkalti/backoff's defaults (Monogon's).

A runnable that dies waits ``interval`` (randomised by ±``jitter``) before its restart;
each death multiplies the interval by ``multiplier`` up to ``maximum``. The state lives in
the runnable's tree node, so it survives restarts, and only a healthy or done signal resets
it: a runnable that keeps dying before it gets healthy backs off longer and longer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff", "BackoffPolicy"]


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """How long a dead runnable waits before it restarts."""

    initial: float = 0.5
    """Interval after the first failure, in seconds."""
    multiplier: float = 1.5
    """Factor applied to the interval after each failure."""
    maximum: float = 60.0
    """Cap on the (un-jittered) interval, in seconds."""
    jitter: float = 0.5
    """Randomisation factor: a delay is drawn from interval × [1 - jitter, 1 + jitter]."""
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)
    """Source of jitter; seed it for reproducible delays."""

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0:
            raise ValueError("backoff intervals must not be negative")
        if self.multiplier < 1:
            raise ValueError("backoff multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be between 0 and 1")


class Backoff:
    """The backoff state of one runnable."""

    __slots__ = ("_interval", "policy")

    def __init__(self, policy: BackoffPolicy) -> None:
        self.policy = policy
        self._interval = policy.initial

    def next_delay(self) -> float:
        """The delay before the next restart; grows the interval for the one after."""
        policy = self.policy
        spread = policy.jitter * self._interval
        delay = self._interval - spread + policy.rng.random() * 2 * spread
        self._interval = min(self._interval * policy.multiplier, policy.maximum)
        return delay

    def reset(self) -> None:
        """Back to the initial interval (on a healthy or done signal)."""
        self._interval = self.policy.initial

    @property
    def interval(self) -> float:
        """The un-jittered interval the next failure will use."""
        return self._interval
