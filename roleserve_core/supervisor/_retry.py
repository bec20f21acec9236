"""Retrying inside a runnable: the restart backoff's delays, slept on a ``Clock``.

A runnable that fails is restarted after the supervisor's ``Backoff``; some failures are
better retried where they happen (etcd refusing a membership change for a moment, a curator
not answering yet), without losing what the runnable holds. ``Retry`` gives such a loop
the same delays, slept on the node's clock, so that the test kit's ``FakeClock`` drives
them as it drives restarts::

    attempt ─▶ failed, worth trying again? ─▶ wait(): sleep ``delay`` on the clock
        ▲                                       (the next delay grows, up to the maximum)
        └───────────────────────────────────────┘
    progress (an answer, a response) ─▶ reset(): the next delay is the first again

``retry`` is the common case, one call repeated until it stops raising what ``retry_on``
names; a loop that does more between attempts (yields what it got, logs the delay, waits
for newer inputs instead) holds a ``Retry`` itself.

What is left out on purpose: a deadline and a number of attempts. A limit in time is the
caller's cancel scope (``anyio.move_on_after``), which also bounds the attempt itself; no
loop of roleserve gives up after a count.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from roleserve_core.clock import Clock, MonotonicClock
from roleserve_core.supervisor._backoff import Backoff, BackoffPolicy

__all__ = ["Retry", "retry"]

T = TypeVar("T")
E = TypeVar("E", bound=Exception)


class Retry:
    """The pauses between the attempts of one retrying loop.

    The delay of the next pause is drawn in advance (``delay``), so that a log line can say
    it before the loop waits: with jitter, it could not be known otherwise.
    """

    __slots__ = ("_backoff", "_delay", "clock")

    def __init__(self, policy: BackoffPolicy | None = None, *, clock: Clock | None = None):
        """:param policy: the delays, the supervisor's restart backoff by default.
        :param clock: what to sleep on: the runnable's ``ctx.clock``, so that a fake clock
            drives it in tests; the event loop's by default."""
        self.clock: Clock = clock or MonotonicClock()
        self._backoff = Backoff(policy or BackoffPolicy())
        self._delay = self._backoff.next_delay()

    @property
    def delay(self) -> float:
        """Seconds the next ``wait`` sleeps."""
        return self._delay

    def next_delay(self) -> float:
        """Take the next pause without sleeping it here (a loop that waits for something
        else meanwhile, at most that long): its delay; the one after grows."""
        delay, self._delay = self._delay, self._backoff.next_delay()
        return delay

    async def wait(self) -> None:
        """Sleep ``delay`` seconds on the clock; the next pause is longer."""
        await self.clock.sleep(self.next_delay())

    def reset(self) -> None:
        """The loop made progress: the next pause is the first delay again."""
        self._backoff.reset()
        self._delay = self._backoff.next_delay()


async def retry(
    attempt: Callable[[], Awaitable[T]],
    *,
    retry_on: type[E] | tuple[type[E], ...],
    when: Callable[[E], bool] | None = None,
    backoff: BackoffPolicy | None = None,
    clock: Clock | None = None,
) -> T:
    """What ``attempt()`` returns, calling it again after each pause of ``backoff`` while
    it raises ``retry_on`` (and ``when`` says yes to the error, if given).

    Anything else it raises propagates at once. It tries forever: bound it with the
    caller's cancel scope (``with anyio.move_on_after(limit):``).

    :param retry_on: the exception class (or classes) worth another attempt.
    :param when: of those, which ones (a reason in the message, a status code).
    :param backoff: the delays, the supervisor's restart backoff by default.
    :param clock: what to sleep on, as for ``Retry``.
    """
    pauses = Retry(backoff, clock=clock)
    while True:
        try:
            return await attempt()
        except retry_on as exc:
            if when is not None and not when(exc):
                raise
        await pauses.wait()
