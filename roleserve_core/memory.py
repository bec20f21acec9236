"""How a node keeps its memory small: few malloc arenas, and freed memory given back.

**Arenas.** glibc's ``malloc`` gives each thread that allocates an arena of its own (heaps
apart, so threads do not wait for one lock), up to 8 per core. A node's threads are mostly
gRPC's C threads, the worker threads of ``anyio.to_thread`` and the metrics server's: each
keeps the pages its arena touched, free or not, for as long as the node runs, although
they are idle nearly always. ``limit_arenas`` (called by ``roleserve node run`` before
any thread starts) caps them at ``ARENAS``: the threads share two heaps, what one frees
another reuses. Not where the environment already says (``MALLOC_ARENA_MAX``, or
``arena_max`` in ``GLIBC_TUNABLES``): the operator's choice wins, and a benchmark can
compare (``benchmarks/node_weight.py --env MALLOC_ARENA_MAX=16``).

**Giving back.** Once a change of roles has settled.

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
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping

from roleserve_core.clock import Clock

__all__ = ["ARENAS", "SETTLE", "limit_arenas", "release_after_changes", "release_free_memory"]

log = logging.getLogger(__name__)

SETTLE = 5.0
"""Seconds after a change of roles before freed memory is returned: the role's workers
have imported their modules and made their first round by then."""

ARENAS = 2
"""malloc arenas a node process may have (glibc's default: 8 per core). Two, not one: the
event loop's thread keeps an arena without waiting on gRPC's threads."""

_M_ARENA_MAX = -8
"""``mallopt``'s parameter number for the arena limit (glibc's ``malloc.h``)."""


def limit_arenas(arenas: int = ARENAS, environ: Mapping[str, str] = os.environ) -> bool:
    """Let this process's threads share at most ``arenas`` malloc arenas (module
    docstring); whether it set the limit: not where the C library is not glibc, nor where
    ``environ`` sets one already. Call it before the threads start: an arena, once made,
    stays."""
    if "MALLOC_ARENA_MAX" in environ or "arena_max" in environ.get("GLIBC_TUNABLES", ""):
        return False
    mallopt = _glibc("mallopt")
    return mallopt is not None and mallopt(_M_ARENA_MAX, arenas) == 1


@functools.cache
def _glibc(name: str) -> Callable[..., int] | None:
    """A function of glibc's malloc (``malloc_trim``, ``mallopt``), or None where the C
    library has none."""
    try:
        function: Callable[..., int] = getattr(ctypes.CDLL(None), name)  # the process's libc
    except (OSError, AttributeError):
        return None
    return function


def release_free_memory() -> bool:
    """Return the free pages of every ``malloc`` heap to the system; whether it could
    (glibc only)."""
    trim = _glibc("malloc_trim")
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
