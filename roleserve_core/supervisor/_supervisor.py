"""The supervisor: runs the tree, reacts to deaths, restarts drained subtrees.

Monogon's supervisor runs one processor goroutine that wakes every millisecond and walks the
whole tree to find restartable subtrees. Here every event is handled where it happens, on
the event loop, in O(depth) work: each node counts the unfinished nodes of its subtree
(``busy``); when a runnable finishes, the counts of its ancestors drop, and the walk up from
it finds the largest drained subtree whose root wants a restart and whose parent is still
running. Nothing polls, and a tree of 10,000 runnables costs nothing while it is quiet.

All runnables run as tasks of one task group owned by the supervisor; each has its own
cancel scope. A parent's cancellation reaches its descendants because the supervisor
cancels their scopes too, which is the explicit form of Go's derived contexts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType

import anyio
from anyio.abc import TaskGroup

from roleserve_core.clock import Clock, MonotonicClock
from roleserve_core.errors import (
    ChildrenAfterHealthyError,
    InvalidRunnableNameError,
    InvalidSignalError,
    RunnableCancelledError,
    RunnableNotFoundError,
    RunnableReturnedError,
    SupervisorError,
)
from roleserve_core.event import Value
from roleserve_core.logtree import LogTree
from roleserve_core.supervisor._api import (
    RunContext,
    Runnable,
    RunnableError,
    RunnableStatus,
    State,
)
from roleserve_core.supervisor._backoff import BackoffPolicy
from roleserve_core.supervisor._failure import (
    FAILED_FOR_GOOD,
    WAITING_FOR_OPERATOR,
    FailureKind,
    classify_failure,
    final_cause,
    resource_cause,
)
from roleserve_core.supervisor._node import Node

__all__ = ["CrashLoopPolicy", "StateObserver", "Supervisor", "SupervisorStatistics"]

NAME_PATTERN = re.compile(r"[a-z0-9_]{1,64}")
"""Runnable names; matched in full (Monogon's pattern has no anchors, which lets a dot in)."""

SUPERVISOR_DN = "supervisor"
"""The DN the supervisor logs its own messages at."""

StateObserver = Callable[[str, State | None, State], None]
"""Called as ``observer(dn, old_state, new_state)`` on every state change; must not block.

``old_state`` is None the first time a DN is seen. This is the hook metrics use.
"""


@dataclass(frozen=True, slots=True)
class CrashLoopPolicy:
    """When a runnable counts as crash-looping."""

    threshold: int = 5
    """Deaths within ``window`` that make the flag true."""
    window: float = 300.0
    """Seconds of history considered."""


@dataclass(frozen=True, slots=True)
class SupervisorStatistics:
    """Counters of the whole tree."""

    runnables: int
    """Nodes in the tree."""
    live: int
    """Nodes whose code has not finished."""
    by_state: Mapping[State, int]
    """Nodes per state."""
    restarts: int
    """Restarts of nodes currently in the tree."""


class Supervisor:
    """Runs a tree of runnables, rooted at ``root``, and keeps it running.

    Use as an async context manager; leaving the block cancels every runnable and waits
    for them all to finish::

        async with Supervisor(root) as supervisor:
            await supervisor.wait_state("root.server", State.HEALTHY)
    """

    def __init__(
        self,
        root: Runnable,
        *,
        backoff: BackoffPolicy | None = None,
        crash_loop: CrashLoopPolicy | None = None,
        clock: Clock | None = None,
        logtree: LogTree | None = None,
        observers: Iterable[StateObserver] = (),
    ) -> None:
        self._root_runnable = root
        self.backoff = backoff or BackoffPolicy()
        self.crash_loop = crash_loop or CrashLoopPolicy()
        self.clock: Clock = clock or MonotonicClock()
        self.logtree = logtree or LogTree()
        self.log = self.logtree.logger(SUPERVISOR_DN)
        self._observers = list(observers)
        self._root: Node | None = None
        self._task_group: TaskGroup | None = None
        self._stopping = False
        self._changes: Value[int] = Value()
        self._change_count = 0
        self.final_failures: Value[RunnableStatus] = Value()
        """Set to a runnable's status each time one fails with a ``FinalError``.

        This is how the node process learns of them: it watches this value and stops
        while the node is not enrolled yet (bootstrapping or registering: nobody could see
        or fix the failure), and keeps running once enrolled. Like every value it keeps
        the latest only; a watcher that needs every final runnable reads ``status()`` for
        those marked ``final``.
        """

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Supervisor:
        if self._task_group is not None:
            raise SupervisorError("a Supervisor can be entered only once")
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._root = self._new_node("root", None, self._root_runnable)
        self._notify(self._root, None)
        self._schedule(self._root, delay=0.0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._task_group is not None
        assert self._root is not None
        self._stopping = True
        for node in self._root.walk():
            node.scope.cancel()
        return await self._task_group.__aexit__(exc_type, exc, tb)

    def add_observer(self, observer: StateObserver) -> None:
        """Call ``observer`` on every later state change (see ``StateObserver``)."""
        self._observers.append(observer)

    # -- requests from runnables (through RunContext) -------------------------------

    def _new_node(self, name: str, parent: Node | None, runnable: Runnable) -> Node:
        dn = name if parent is None else f"{parent.dn}.{name}"
        return Node(name, parent, runnable, self.backoff, self.logtree.logger(dn))

    def _start_children(self, parent: Node, runnables: Mapping[str, Runnable]) -> None:
        if parent.state is not State.NEW:
            raise ChildrenAfterHealthyError(
                f"{parent.dn}: children can only be started before signal_healthy() "
                f"(state is {parent.state.value})"
            )
        for name in runnables:
            if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
                raise InvalidRunnableNameError(
                    f"{parent.dn}: invalid runnable name {name!r}; "
                    "names must match ^[a-z0-9_]{1,64}$"
                )
            if name in parent.children:
                raise InvalidRunnableNameError(f"{parent.dn}: a child named {name!r} exists")
        group = [self._new_node(name, parent, fn) for name, fn in runnables.items()]
        for node in group:
            node.group = group
            if parent.cancelled:
                # As a Go context derived from a cancelled one: a child started by a runnable
                # that is being cancelled (e.g. from a ``finally``) starts cancelled. Else it
                # would outlive its parent's cancellation, and its parent's restart or the
                # supervisor's shutdown would wait for it forever.
                node.scope.cancel()
            parent.children[node.name] = node
            self._notify(node, None)
            self._schedule(node, delay=0.0)

    def _signal_healthy(self, node: Node) -> None:
        if node.state is not State.NEW:
            raise InvalidSignalError(
                f"{node.dn}: signal_healthy() in state {node.state.value}; "
                "a runnable signals healthy once, from NEW"
            )
        node.backoff.reset()
        self._set_state(node, State.HEALTHY)

    def _signal_done(self, node: Node) -> None:
        if node.state is not State.HEALTHY or node.signaled_done:
            raise InvalidSignalError(
                f"{node.dn}: signal_done() in state {node.state.value}"
                f"{' after signal_done()' if node.signaled_done else ''}; "
                "a runnable signals done once, after signal_healthy()"
            )
        node.signaled_done = True
        node.backoff.reset()

    def _set_note(self, node: Node, note: str) -> None:
        # A note is not a state change: wake the waiters, but do not call the observers
        # (a metrics observer would count a HEALTHY → HEALTHY transition per note).
        node.note = note
        self._changed()

    def _restart(self, node: Node) -> None:
        if node.final:
            # The operator fixed what the FinalError named: start it again at once.
            node.final = False
            node.pending_delay = 0.0
        self._cancel_subtree(node)
        self._restart_drained(node)

    # -- running ------------------------------------------------------------------

    def _schedule(self, node: Node, delay: float) -> None:
        assert self._task_group is not None
        for ancestor in node.ancestors():
            ancestor.busy += 1
        node.restart_at = self.clock.now() + delay if delay > 0 else None
        self._task_group.start_soon(self._run, node, delay, name=node.dn)

    async def _run(self, node: Node, delay: float) -> None:
        ctx = RunContext(self, node, node.generation)
        error: BaseException | None = None
        returned = False
        try:
            with self._own_cancellation_ends_here(node), node.scope:
                if delay > 0:
                    # Until the deadline set when the restart was scheduled (the one status
                    # shows as restart_in), not ``delay`` from whenever this task first runs:
                    # on a fake clock advanced in between, that would never come.
                    assert node.restart_at is not None
                    await self.clock.sleep(node.restart_at - self.clock.now())
                node.restart_at = None
                try:
                    await node.runnable(ctx)
                    returned = True
                except Exception as exc:  # a runnable's failure is data, not our crash
                    error = exc
                except BaseExceptionGroup as group:
                    failures, _ = group.split(Exception)
                    if failures is None and self._cancel_was_asked():
                        raise
                    error = failures or _unasked_cancellation(node, group)
                except anyio.get_cancelled_exc_class() as cancelled:
                    if self._cancel_was_asked():
                        raise
                    error = _unasked_cancellation(node, cancelled)
        finally:
            self._finished(node, error, returned)

    @contextlib.contextmanager
    def _own_cancellation_ends_here(self, node: Node) -> Iterator[None]:
        """Keep the cancellation of one runnable inside its own task.

        ``node.scope`` swallows the cancellation it delivered only if the exception is
        anyio's own. A library that turns it into a CancelledError of its own (a gRPC call
        cancelled under a restarting runnable raises a fresh ``asyncio.CancelledError``)
        gets past the scope; leaving the task, it would make the supervisor's task group
        cancel every runnable, and the whole tree would end with no error at all. When this
        run was asked to stop and nothing above it is stopping, such a cancellation ends
        this run only (CANCELED, as asked).
        """
        cancelled = anyio.get_cancelled_exc_class()
        try:
            yield
        except cancelled as raised:
            if not self._only_this_run_stops(node, raised):
                raise
        except BaseExceptionGroup as raised:
            first = _only_cancellations(raised)
            if first is None:
                raise
            if not self._only_this_run_stops(node, raised):
                # A group of nothing but cancellations is a cancellation: raised as the
                # group, the task group would take it for an error while stopping.
                raise first from raised

    def _only_this_run_stops(self, node: Node, raised: BaseException) -> bool:
        # Not _cancel_was_asked(): the native cancel anyio used stays counted on the task
        # when its scope lets the exception through. Only an enclosing scope (the
        # supervisor stopping, its host cancelled) shows as a deadline in the past here.
        above_stops = anyio.current_effective_deadline() == -math.inf
        return node.cancelled and not self._stopping and not above_stops

    @staticmethod
    def _cancel_was_asked() -> bool:
        """Whether a cancellation that ended a runnable was asked for: its own scope, or an
        enclosing one (the supervisor stopping, its host cancelled), is cancelled, which
        anyio shows as an effective deadline in the past; or the task itself was cancelled
        (the event loop shutting down cancels every task left). A runnable's inner scopes
        absorb their own cancellations, so anything else is a stray one, raised rather
        than delivered."""
        task = asyncio.current_task()
        cancelled = task is not None and task.cancelling() > 0
        return cancelled or anyio.current_effective_deadline() == -math.inf

    def _finished(self, node: Node, error: BaseException | None, returned: bool) -> None:
        """The runnable's code ended: settle its state, then restart what can be restarted."""
        if returned and node.signaled_done and error is None:
            final = State.DONE
        elif error is None and (node.cancelled or self._stopping or not returned):
            final = State.CANCELED
        else:
            if error is None:
                error = RunnableReturnedError(
                    f"{node.dn}: returned without signalling done (state {node.state.value})"
                )
            final = State.DEAD
        node.restart_at = None
        self._set_state(node, final)
        for ancestor in node.ancestors():
            ancestor.busy -= 1
        if final is State.DEAD:
            assert error is not None
            self._record_failure(node, error)
            if node.final:
                self.final_failures.set(self._status_of(node))
            cancelled = [node, *(sibling for sibling in node.group if sibling is not node)]
            for root in cancelled:
                self._cancel_subtree(root)
            for root in cancelled:
                self._restart_drained(root)
        else:
            self._restart_drained(node)

    def _record_failure(self, node: Node, error: BaseException) -> None:
        """Keep the failure (with its traceback) in the status, and log it by its kind.

        One line for a final or an expected failure, the traceback only for an unexpected
        one (``_failure`` decides which is which). The backoff is drawn here, so that the
        line can say when the restart comes.
        """
        node.failures += 1
        node.failure_times.append(self.clock.now())
        cause = _sole_cause(error)
        node.last_error = RunnableError(
            type=f"{type(cause).__module__}.{type(cause).__qualname__}".removeprefix("builtins."),
            message=str(cause),
            traceback="".join(traceback.format_exception(error)),
            at=time.time(),
        )
        kind = classify_failure(error)
        if kind is FailureKind.FINAL:
            node.final = True
            node.note = str(final_cause(error))
            node.log.error("%s%s", FAILED_FOR_GOOD, node.note)
            return
        node.pending_delay = node.backoff.next_delay()
        summary = node.last_error.summary()
        restart = f"restarting in {node.pending_delay:.2f}s"
        resource = resource_cause(error)
        if resource is not None:
            node.log.error("%s%s; %s", WAITING_FOR_OPERATOR, resource, restart)
        elif kind is FailureKind.EXPECTED:
            node.log.warning("runnable failed: %s; %s", summary, restart)
        else:
            node.log.error("runnable failed: %s; %s", summary, restart, exc_info=error)

    def _cancel_subtree(self, top: Node) -> None:
        for node in top.walk():
            node.scope.cancel()

    def _restart_drained(self, start: Node) -> None:
        """Walk up from ``start`` and restart the first drained subtree that wants it.

        A node wants a restart when its run was cancelled and its code has finished; it may
        restart once its whole subtree has finished and its parent is still running. If the
        parent was cancelled too, the parent (or an ancestor) restarts instead, taking the
        subtree with it. A node that failed for good (``final``) never wants one by itself:
        it waits for ``restart(dn)``; its parent's restart still replaces it.
        """
        if self._stopping:
            return
        node: Node | None = start
        while node is not None and node.busy == 0:
            parent = node.parent
            wants = node.cancelled and node.state.terminal and not node.final
            if wants and (parent is None or not parent.cancelled):
                self._restart_node(node)
                return
            node = parent

    def _restart_node(self, node: Node) -> None:
        old = node.state
        delay = node.pending_delay if old is State.DEAD else 0.0
        node.reset()
        # A death's own line already said "restarting in ..."; this one is for the record.
        level = logging.DEBUG if old is State.DEAD else logging.INFO
        self.log.log(level, "restarting %s%s", node.dn, f" in {delay:.2f}s" if delay > 0 else "")
        self._notify(node, old)
        self._schedule(node, delay)

    # -- state and observation ------------------------------------------------------

    def _set_state(self, node: Node, state: State) -> None:
        old = node.state
        node.state = state
        node.since = time.time()
        self._notify(node, old)

    def _notify(self, node: Node, old: State | None) -> None:
        for observer in self._observers:
            observer(node.dn, old, node.state)
        self._changed()

    def _changed(self) -> None:
        """Wake ``wait_until`` waiters: something they may be waiting for changed."""
        self._change_count += 1
        self._changes.set(self._change_count)

    def _find(self, dn: str) -> Node:
        if self._root is None:
            raise RunnableNotFoundError(f"no runnable {dn!r}: the supervisor is not running")
        first, *names = dn.split(".")
        node = self._root
        if first != node.name:
            raise RunnableNotFoundError(f"no runnable {dn!r}")
        for name in names:
            child = node.children.get(name)
            if child is None:
                raise RunnableNotFoundError(f"no runnable {dn!r} (no {name!r} under {node.dn})")
            node = child
        return node

    def _status_of(self, node: Node) -> RunnableStatus:
        horizon = self.clock.now() - self.crash_loop.window
        while node.failure_times and node.failure_times[0] < horizon:
            node.failure_times.popleft()
        restart_in = None
        if node.restart_at is not None:
            restart_in = max(0.0, node.restart_at - self.clock.now())
        return RunnableStatus(
            dn=node.dn,
            state=node.state,
            restarts=node.restarts,
            failures=node.failures,
            last_error=node.last_error,
            since=node.since,
            crash_looping=len(node.failure_times) >= self.crash_loop.threshold,
            restart_in=restart_in,
            note=node.note,
            final=node.final,
        )

    def status(self, dn: str = "root") -> list[RunnableStatus]:
        """The status of ``dn`` and every runnable under it, parents before children.

        :raises RunnableNotFoundError: if there is no runnable ``dn``.
        """
        return [self._status_of(node) for node in self._find(dn).walk()]

    def status_of(self, dn: str) -> RunnableStatus:
        """The status of one runnable.

        :raises RunnableNotFoundError: if there is no runnable ``dn``.
        """
        return self._status_of(self._find(dn))

    def restart(self, dn: str) -> None:
        """Restart the runnable ``dn`` and its subtree (as ``RunContext.restart``).

        A runnable that failed for good (``final``) starts again at once: this is how the
        operator says the cause is fixed.

        :raises RunnableNotFoundError: if there is no runnable ``dn``.
        """
        self._restart(self._find(dn))

    def statistics(self) -> SupervisorStatistics:
        """Counters over the whole tree."""
        nodes = self._root.walk() if self._root is not None else []
        by_state = dict.fromkeys(State, 0)
        for node in nodes:
            by_state[node.state] += 1
        return SupervisorStatistics(
            runnables=len(nodes),
            live=self._root.busy if self._root is not None else 0,
            by_state=by_state,
            restarts=sum(node.restarts for node in nodes),
        )

    async def wait_until(self, predicate: Callable[[Supervisor], bool]) -> None:
        """Wait until ``predicate(self)`` is true; it is checked after every state change.

        Bound it with ``anyio.fail_after``.
        """
        with self._changes.watch() as changes:
            while not predicate(self):
                await changes.get()

    async def wait_status(
        self, dn: str, predicate: Callable[[RunnableStatus], bool]
    ) -> RunnableStatus:
        """Wait until the runnable ``dn`` exists and its status satisfies ``predicate``.

        Bound it with ``anyio.fail_after``.
        """
        found: list[RunnableStatus] = []

        def reached(supervisor: Supervisor) -> bool:
            try:
                status = supervisor.status_of(dn)
            except RunnableNotFoundError:
                return False
            if predicate(status):
                found.append(status)
                return True
            return False

        await self.wait_until(reached)
        return found[-1]

    async def wait_state(self, dn: str, *states: State) -> RunnableStatus:
        """Wait until the runnable ``dn`` exists and is in one of ``states``.

        Bound it with ``anyio.fail_after``.
        """
        return await self.wait_status(dn, lambda status: status.state in states)


def _only_cancellations(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first cancellation of a group that holds nothing else; None otherwise."""
    cancelled, rest = group.split(anyio.get_cancelled_exc_class())
    if cancelled is None or rest is not None:
        return None
    first: BaseException = cancelled
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def _unasked_cancellation(node: Node, cancelled: BaseException) -> RunnableCancelledError:
    error = RunnableCancelledError(
        f"{node.dn}: raised a cancellation nobody asked for (a gRPC call cancelled under it?)"
    )
    error.__cause__ = cancelled
    return error


def _sole_cause(error: BaseException) -> BaseException:
    """The one exception inside (nested) single-member groups, for a readable summary.

    A runnable that uses a task group raises its failure wrapped in an ExceptionGroup;
    "RuntimeError: disk full" says more than "ExceptionGroup: unhandled errors (1 sub-
    exception)". The full traceback keeps the group.
    """
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
