"""The log tree: the last N log records of every runnable, by DN, readable and followable.

Every runnable logs through ``ctx.log``, a standard ``logging.Logger`` whose name is the
runnable's DN (``root.role.kubernetes``). The loggers of one log tree form their own
``logging`` hierarchy, so two supervisors in one process (a test, ``cluster up``) never mix
their records, and the usual tools keep working: ``ctx.log.setLevel``, ``addHandler``,
``getChild``, filters.

::

    ctx.log ("root.role.x") ─▶ "root.role" ─▶ "root" ─▶ tree root ─┬─▶ ring buffer per DN
                                                                   ├─▶ live followers
                                                                   └─▶ "roleserve" logger
                                                                       (process handlers)

Each DN keeps its last ``capacity`` records in a ring buffer: a chatty runnable cannot push
out the history of a quiet one, and memory is bounded by capacity × DNs. Records are read by
DN or by subtree (a DN and everything under it), merged in the order they were logged, and
followed live. A follower that falls behind loses its oldest unread records, never blocks
the logger, and is told how many it lost.

Records at or above the tree's level (INFO by default) are kept; the process's ``roleserve``
logger decides separately, by its own effective level, what reaches the process's handlers.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType

import anyio

__all__ = ["LogEntry", "LogFollower", "LogTree"]

PROCESS_LOGGER = "roleserve"
"""The process-wide logger that every log tree forwards its records to."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One stored log record."""

    seq: int
    """Position in the tree's global order; later records have larger numbers."""
    dn: str
    """The DN (logger name) the record was logged at."""
    time: float
    """Wall-clock time of the record (``time.time()`` scale)."""
    level: int
    """Numeric ``logging`` level."""
    message: str
    """The formatted message."""
    exc_text: str | None = None
    """The formatted exception, if the record carried one."""

    @property
    def level_name(self) -> str:
        """``INFO``, ``WARNING``, ..."""
        return logging.getLevelName(self.level)

    def format(self) -> str:
        """One human-readable line (plus the exception, if any)."""
        import time as _time

        milliseconds = round(self.time * 1000)  # not (time % 1) * 1000: .123 would print .122
        stamp = _time.strftime("%H:%M:%S", _time.localtime(milliseconds // 1000))
        millis = milliseconds % 1000
        line = f"{stamp}.{millis:03d} {self.level_name[0]} {self.dn}: {self.message}"
        return f"{line}\n{self.exc_text}" if self.exc_text else line


def _in_subtree(dn: str, top: str) -> bool:
    return dn == top or dn.startswith(top + ".")


class _TreeHandler(logging.Handler):
    """Stores records into the tree and forwards them to the process logger."""

    def __init__(self, tree: LogTree) -> None:
        super().__init__()
        self._tree = tree

    def emit(self, record: logging.LogRecord) -> None:
        # As every standard handler: a record that cannot be handled (bad format arguments,
        # say) is reported by handleError, never raised into the code that logged it, so a
        # mistake in a log call cannot kill a runnable.
        try:
            self._tree._store(record)
        except Exception:
            self.handleError(record)
            return
        process = logging.getLogger(PROCESS_LOGGER)
        if process.isEnabledFor(record.levelno):
            process.handle(record)


class LogFollower:
    """Live records of one DN or subtree; an async iterator, closed on ``with`` exit."""

    def __init__(self, tree: LogTree, dn: str, subtree: bool, buffer: int) -> None:
        self._tree = tree
        self.dn = dn
        self.subtree = subtree
        self._pending: deque[LogEntry] = deque(maxlen=buffer)
        self._wakeup = anyio.Event()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._closed = False
        self.dropped = 0
        """Records lost because this follower fell more than ``buffer`` records behind."""

    def _matches(self, dn: str) -> bool:
        return _in_subtree(dn, self.dn) if self.subtree else dn == self.dn

    def _push(self, entry: LogEntry) -> None:
        # Called under the tree's lock, from whatever thread logged.
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        self._pending.append(entry)
        if threading.get_ident() == self._thread:
            self._wakeup.set()
        else:
            self._loop.call_soon_threadsafe(self._wakeup.set)

    async def next(self) -> LogEntry:
        """Wait for the next record.

        :raises anyio.EndOfStream: once the follower is closed.
        """
        while not self._pending:
            if self._closed:
                raise anyio.EndOfStream
            await self._wakeup.wait()
            self._wakeup = anyio.Event()
        return self._pending.popleft()

    def close(self) -> None:
        """Stop following. Idempotent."""
        if not self._closed:
            self._closed = True
            self._tree._unfollow(self)
            self._wakeup.set()

    def __aiter__(self) -> LogFollower:
        return self

    async def __anext__(self) -> LogEntry:
        try:
            return await self.next()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class LogTree:
    """Per-DN ring buffers of log records, with a ``logging`` hierarchy of their own."""

    def __init__(self, capacity: int = 1000, level: int = logging.INFO) -> None:
        """
        :param capacity: records kept per DN.
        :param level: records below this level are not created at all (unless a DN's
            logger is given a lower level of its own).
        """
        if capacity < 1:
            raise ValueError("log tree capacity must be at least 1")
        self.capacity = capacity
        # The Manager wants a RootLogger; this one is private to the tree and never the
        # process's root logger.
        self._root = logging.RootLogger(level)
        self._root.name = "<logtree>"
        self._root.propagate = False
        self._root.addHandler(_TreeHandler(self))
        self._manager = logging.Manager(self._root)
        self._buffers: dict[str, deque[LogEntry]] = {}
        self._followers: list[LogFollower] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def logger(self, dn: str) -> logging.Logger:
        """The standard logger for ``dn``, in this tree's own hierarchy."""
        return self._manager.getLogger(dn)

    def set_level(self, level: int) -> None:
        """Change the tree-wide level (DN loggers with a level of their own keep it)."""
        self._root.setLevel(level)
        self._manager._clear_cache()  # type: ignore[attr-defined]  # stdlib keeps level caches here

    def _store(self, record: logging.LogRecord) -> None:
        exc_text = None
        if record.exc_info:
            exc_text = logging.Formatter().formatException(record.exc_info)
        with self._lock:
            entry = LogEntry(
                seq=next(self._seq),
                dn=record.name,
                time=record.created,
                level=record.levelno,
                message=record.getMessage(),
                exc_text=exc_text,
            )
            buffer = self._buffers.get(record.name)
            if buffer is None:
                buffer = self._buffers[record.name] = deque(maxlen=self.capacity)
            buffer.append(entry)
            for follower in self._followers:
                if follower._matches(entry.dn):
                    follower._push(entry)

    def dns(self) -> list[str]:
        """Every DN that has logged, sorted."""
        with self._lock:
            return sorted(self._buffers)

    def entries(
        self, dn: str, *, subtree: bool = False, limit: int | None = None
    ) -> list[LogEntry]:
        """The stored records of ``dn`` (and, with ``subtree``, of every DN under it).

        :param limit: return only the newest ``limit`` records.
        :returns: records in the order they were logged.
        :raises ValueError: if ``limit`` is negative.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must not be negative, not {limit}")
        with self._lock:
            if subtree:
                chosen: Iterable[deque[LogEntry]] = [
                    buf for name, buf in self._buffers.items() if _in_subtree(name, dn)
                ]
            else:
                chosen = [self._buffers[dn]] if dn in self._buffers else []
            merged: Iterator[LogEntry] = heapq.merge(*(list(b) for b in chosen), key=_seq_of)
            result = list(merged)
        if limit is not None:
            # Not result[-limit:]: for limit 0 that is the whole list.
            del result[: max(len(result) - limit, 0)]
        return result

    def follow(self, dn: str, *, subtree: bool = True, buffer: int = 10_000) -> LogFollower:
        """Follow new records of ``dn`` (and its subtree) from now on.

        Must be called from the event loop thread. Use as ``with tree.follow(dn) as f:
        async for entry in f: ...``.
        """
        follower = LogFollower(self, dn, subtree, buffer)
        with self._lock:
            self._followers.append(follower)
        return follower

    def _unfollow(self, follower: LogFollower) -> None:
        with self._lock:
            if follower in self._followers:
                self._followers.remove(follower)


def _seq_of(entry: LogEntry) -> int:
    return entry.seq
