"""The shape both Kubernetes workers run in: wait for a startup, start, restart on a change.

::

    inputs (Combined) ─▶ fold(*inputs) ─▶ str: what it waits for (the note; not healthy)
                                    └──▶ a startup ─▶ start(startup)
                                                        │ inputs change
                                                        ▼
                         fold gives something else ─▶ returned: the caller restarts

The worker compares startups, not inputs: a change of an input the startup does not
depend on (a status update of the node, say) restarts nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from roleserve_core import Combined, RunContext

__all__ = ["start_when_ready"]

S = TypeVar("S")


async def start_when_ready(
    ctx: RunContext,
    inputs: Combined,
    fold: Callable[..., S | str],
    start: Callable[[S], Awaitable[None]],
) -> S | str:
    """Note what ``fold`` says it waits for until it gives a startup, ``start`` it, then wait
    until ``fold`` gives anything else; returns that (the caller restarts)."""
    current: tuple[Any, ...] = await inputs.get()
    startup = fold(*current)
    while isinstance(startup, str):
        ctx.set_note(startup)
        current = await inputs.get()
        startup = fold(*current)
    await start(startup)
    while (now := fold(*current)) == startup:
        current = await inputs.get()
    return now
