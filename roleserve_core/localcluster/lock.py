"""One ``cluster up`` at a time on a cluster's directory.

::

    up #1:  lock D/up.lock ──▶ bootstrap, enrol, wait until UP and HEALTHY ──▶ unlock
    up #2:  lock D/up.lock: held ──▶ "waiting for the other `cluster up` (pid …)" … ──▶
            locked ──▶ reads D (three nodes now), finds them running, reports all three

Two ``up`` on one fresh directory both bootstrapped node 1's directory, or the second,
seeing only node 1 enrolled yet, said ``the cluster is up: 1 node`` while the first still
enrolled the others. The second now waits, then reads the directory afresh: the cluster
the first made. The lock is an ``flock`` on ``D/up.lock``, which the kernel releases when
its holder exits however it ends, so a killed ``up`` never leaves it held; the file keeps
the holder's PID, for the line that says whom the second waits for. It is held while
``up`` brings the cluster up, not while a foreground ``up`` shows its status afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio

from roleserve_core.errors import RoleserveError

__all__ = ["LOCK_FILE", "UpLockError", "holding_up_lock"]

LOCK_FILE = "up.lock"
"""In the cluster's directory: held by the ``cluster up`` at work on it."""
RETRY = 0.25
"""Seconds between attempts to take a lock another ``up`` holds."""


class UpLockError(RoleserveError):
    """The cluster's directory cannot hold the lock (not a directory, not writable)."""


@contextlib.asynccontextmanager
async def holding_up_lock(directory: Path, progress: Callable[[str], None]) -> AsyncIterator[None]:
    """Hold ``directory``'s lock for the block, waiting (and saying so once through
    ``progress``) while another ``cluster up`` holds it; ``directory`` is made if missing.

    :raises UpLockError: naming the directory, if it cannot be made or written.
    """
    path = directory / LOCK_FILE
    descriptor = _open(path)
    try:
        said = False
        while not _locked(descriptor):
            if not said:
                progress(
                    f"waiting for the other `cluster up` on {directory}{_holder(path)} to finish"
                )
                said = True
            await anyio.sleep(RETRY)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _open(path: Path) -> int:
    """The lock file, opened (made, with its directory, if missing).

    :raises UpLockError: naming the directory, if it cannot be.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UpLockError(
            f"cannot use {path.parent} as a cluster's directory: {exc.strerror}"
        ) from None


def _locked(descriptor: int) -> bool:
    """Take the lock if it is free; whether this process holds it now."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(path: Path) -> str:
    """`` (pid N)`` of the holder, as it wrote it; nothing if unreadable."""
    try:
        pid = path.read_text().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""
