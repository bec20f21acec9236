"""Waiting on conditions, never on sleeps."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio

from roleserve_core.event import Value, ValueWatch
from roleserve_core.supervisor import RunnableStatus, State, Supervisor

__all__ = ["DEFAULT_TIMEOUT", "wait_for_state", "wait_for_status", "wait_for_value"]

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
"""Seconds a wait may take before the test fails; generous, since CI machines are slow."""


async def wait_for_value(
    value: Value[T] | ValueWatch[T],
    predicate: Callable[[T], bool] = lambda _: True,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> T:
    """Wait until ``value`` holds something ``predicate`` accepts, and return it.

    The current value counts. Fails with ``TimeoutError`` after ``timeout`` seconds.
    """
    with anyio.fail_after(timeout), value.watch() as watcher:
        return await watcher.get(filter=predicate)


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
