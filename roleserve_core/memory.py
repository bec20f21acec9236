"""Giving the memory the node freed back to the system, once a change of roles has settled.

A node allocates most of what it ever frees in bursts: at start, and when a role comes (the
role's modules imported, its programs started, its first certificates parsed). glibc's
``malloc`` keeps what Python and the C libraries (gRPC, OpenSSL) free in its heaps, for
reuse, and gives back only what lies at the very top of its main heap: the rest stays in
the node's RSS for as long as it runs. ``malloc_trim(0)`` returns every free page of every
heap. The node calls it ``SETTLE`` seconds after it starts and after each change of its
roles (``benchmarks/node_weight.py``: 2–3 MiB of a node's ~73). It takes a few
milliseconds; a change during the wait waits again, so a burst of changes costs one.

Only where the C library is glibc: elsewhere (musl, macOS) there is nothing to call and
nothing is done. Python's own allocator already returns its empty arenas; this is the rest.

Measured and left out (``benchmarks/node_weight.py``, issue 30): limiting glibc's arenas
(``M_ARENA_MAX`` 2 instead of its 16 here) changed nothing beyond the run-to-run noise of
±2 MiB. A node has 10–18 threads (six of them gRPC's) and as many arenas, but all its
arenas but the main one hold ~1 MiB together: the trim above returns their free pages.
Nor did cached bytecode: the trim returns the compiler's garbage too.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import AsyncIterator, Callable

from roleserve_core.clock import Clock

__all__ = ["SETTLE", "release_after_changes", "release_free_memory"]

log = logging.getLogger(__name__)

SETTLE = 5.0
"""Seconds after a change of roles before freed memory is returned: the role's workers
have imported their modules and made their first round by then."""


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # the process's own libc
    except (OSError, AttributeError):
        return None
    return trim


def release_free_memory() -> bool:
    """Return the free pages of every ``malloc`` heap to the system; whether it could
    (glibc only)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


async def release_after_changes(
    changes: AsyncIterator[object],
    clock: Clock,
    *,
    settle: float = SETTLE,
    release: Callable[[], bool] = release_free_memory,
) -> None:
    """Call ``release`` ``settle`` seconds after each item of ``changes`` (the first: the
    start), until ``changes`` ends or this is cancelled; a change that comes during the
    wait is waited for again (``changes`` keeps only the latest, as a value's watcher
    does)."""
    async for _ in changes:
        await clock.sleep(settle)
        if not release():
            log.debug("no malloc_trim in this C library: freed memory stays with malloc")
            return
