"""A node gives back the memory it freed once a change of its roles settled (``memory``)."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

from roleserve_core.event import Value
from roleserve_core.memory import SETTLE, release_after_changes
from roleserve_core.testing import FakeClock

pytestmark = pytest.mark.anyio


async def test_released_once_each_change_settled() -> None:
    clock = FakeClock()
    roles: Value[str] = Value()
    released: list[float] = []

    def release() -> bool:
        released.append(clock.now())
        return True

    start = clock.now()
    async with anyio.create_task_group() as tasks:
        with roles.watch() as changes:
            roles.set("none")
            tasks.start_soon(lambda: release_after_changes(changes, clock, release=release))
            await clock.wait_sleepers(1)
            clock.advance(SETTLE - 0.1)
            await anyio.wait_all_tasks_blocked()
            assert released == []  # not before it settled
            clock.advance(0.1)
            await clock.wait_sleepers(0)
            await anyio.wait_all_tasks_blocked()
            assert released == [start + SETTLE]

            roles.set("kubernetes_worker")  # a role comes: released again, once settled
            await clock.wait_sleepers(1)
            roles.set("kubernetes_worker, consensus_member")  # during the wait
            clock.advance(SETTLE)
            await anyio.wait_all_tasks_blocked()
            await clock.wait_sleepers(1)  # the change during the wait: waited for again
            clock.advance(SETTLE)
            await anyio.wait_all_tasks_blocked()
            assert released == [start + SETTLE, start + 2 * SETTLE, start + 3 * SETTLE]
            tasks.cancel_scope.cancel()


async def test_without_malloc_trim_it_stops_at_the_first_change() -> None:
    clock = FakeClock()
    roles: Value[str] = Value()
    calls = 0

    def release() -> bool:
        nonlocal calls
        calls += 1
        return False  # a C library without malloc_trim

    with roles.watch() as changes:
        roles.set("none")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: release_after_changes(changes, clock, release=release))
            await clock.wait_sleepers(1)
            clock.advance(SETTLE)
        assert calls == 1  # and it returned: nothing left waiting


FREED_IN_THE_HEAP = r"""
import ctypes
from roleserve_core.memory import release_free_memory

def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: the block comes from the heap, not an mmap
libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: free() alone gives nothing back
big, pin = libc.malloc(64 << 20), libc.malloc(64)  # pin: a block above it in the heap
ctypes.memset(big, 1, 64 << 20)
touched = rss_kib()
libc.free(big)
kept = rss_kib()
print(touched, kept, release_free_memory(), rss_kib())
"""


def test_release_free_memory_returns_freed_pages_to_the_system() -> None:
    """glibc (here): 64 MiB freed below a block still in use stay in the RSS, held by
    malloc, until ``release_free_memory``. In a fresh interpreter: malloc's settings are
    the process's."""
    done = subprocess.run(
        [sys.executable, "-c", FREED_IN_THE_HEAP], capture_output=True, text=True, check=True
    )
    touched, kept, released, after = done.stdout.split()
    assert int(kept) > int(touched) - 32 * 1024  # freed, still held
    assert released == "True"
    assert int(after) < int(touched) - 32 * 1024  # given back
