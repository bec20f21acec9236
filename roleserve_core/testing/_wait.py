"""Waiting on conditions, never on sleeps."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from roleserve_core.event import Value, ValueWatch
from roleserve_core.supervisor import RunnableStatus, State, Supervisor

__all__ = [
    "DEFAULT_TIMEOUT",
    "POLL_INTERVAL",
    "poll_until",
    "wait_for_state",
    "wait_for_status",
    "wait_for_value",
]

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
"""Seconds a wait may take before the test fails; generous, since CI machines are slow."""

POLL_INTERVAL = 0.2
"""Seconds between two looks at state in another process (``poll_until``)."""


async def wait_for_value(
    value: Value[T] | ValueWatch[T],
    predicate: Callable[[T], bool] = lambda _: True,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> T:
    """Wait until ``value`` holds something ``predicate`` accepts, and return it.

    The current value counts. Fails with ``TimeoutError`` after ``timeout`` seconds,
    naming the last value it saw.
    """
    with anyio.move_on_after(timeout), value.watch() as watcher:
        return await watcher.get(filter=predicate)
    raise TimeoutError(
        f"no value that the predicate accepts within {timeout:g} s; the last: {_last(value)!r}"
    )


def _last(value: Value[T] | ValueWatch[T]) -> object:
    """What ``value`` holds now, or a word saying it holds nothing yet."""
    try:
        return value.get_nowait()
    except LookupError:
        return "(never set)"


async def wait_for_status(
    supervisor: Supervisor,
    dn: str,
    predicate: Callable[[RunnableStatus], bool],
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> RunnableStatus:
    """Wait until runnable ``dn`` exists and its status satisfies ``predicate``.

    Fails with ``TimeoutError`` naming the DN and its last status after ``timeout``.
    """
    try:
        with anyio.fail_after(timeout):
            return await supervisor.wait_status(dn, predicate)
    except TimeoutError:
        try:
            last = f"last status: {supervisor.status_of(dn)!r}"
        except LookupError:
            last = "it does not exist"
        raise TimeoutError(
            f"{dn} did not reach the expected status within {timeout}s; {last}"
        ) from None


async def wait_for_state(
    supervisor: Supervisor,
    dn: str,
    *states: State,
    timeout: float = DEFAULT_TIMEOUT,
) -> RunnableStatus:
    """Wait until runnable ``dn`` exists and is in one of ``states`` (default HEALTHY).

    Fails with ``TimeoutError`` naming the DN and its last status after ``timeout``.
    """
    wanted = states or (State.HEALTHY,)
    return await wait_for_status(
        supervisor, dn, lambda status: status.state in wanted, timeout=timeout
    )


async def poll_until(
    what: str,
    look: Callable[[], Awaitable[T]],
    predicate: Callable[[T], bool] = bool,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> T:
    """Look at state that lives in another process (a node, over its API) until
    ``predicate`` accepts it, and return what was seen.

    Values in this process are waited on (``wait_for_value``); another process can only be
    asked again, every ``POLL_INTERVAL``. A look that raises counts as not yet. Fails with
    ``TimeoutError`` naming ``what`` and the last thing seen (or raised).
    """
    last: object = "nothing yet"
    with anyio.move_on_after(timeout):
        while True:
            try:
                seen = await look()
            except Exception as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if predicate(seen):
                    return seen
                last = seen
            await anyio.sleep(POLL_INTERVAL)
    raise TimeoutError(f"{what}: not within {timeout}s; last seen: {last!r}")
