"""What a runnable sees: its ``RunContext``, the states, and the status records."""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from roleserve_core.errors import SupervisorError

if TYPE_CHECKING:
    from roleserve_core.clock import Clock
    from roleserve_core.supervisor._node import Node
    from roleserve_core.supervisor._supervisor import Supervisor

__all__ = ["RunContext", "Runnable", "RunnableError", "RunnableStatus", "State"]


class State(enum.Enum):
    """The state of one runnable in the tree."""

    NEW = "NEW"
    """Scheduled or running, and has not signalled healthy yet (also: waiting out backoff)."""
    HEALTHY = "HEALTHY"
    """Signalled healthy; may also have signalled done and be about to return."""
    DONE = "DONE"
    """Signalled done and returned. Its children keep running."""
    DEAD = "DEAD"
    """Raised, or returned without signalling done. Restarts after a backoff, unless it
    raised a ``FinalError``: then it stays DEAD (``RunnableStatus.final``) until restarted."""
    CANCELED = "CANCELED"
    """Stopped because it, an ancestor or a group sibling was cancelled. Restarts at once."""

    @property
    def terminal(self) -> bool:
        """Whether the runnable's code has finished (DONE, DEAD or CANCELED)."""
        return self in _TERMINAL


_TERMINAL = frozenset({State.DONE, State.DEAD, State.CANCELED})

Runnable: TypeAlias = Callable[["RunContext"], Awaitable[None]]
"""``async def run(ctx: RunContext) -> None``: the unit the supervisor runs and restarts."""


@dataclass(frozen=True, slots=True)
class RunnableError:
    """Why a runnable last died."""

    type: str
    """The exception's qualified class name."""
    message: str
    """``str()`` of the exception."""
    traceback: str
    """The formatted traceback."""
    at: float
    """Wall-clock time of the failure."""

    def summary(self) -> str:
        """``Type: message``, one line."""
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass(frozen=True, slots=True)
class RunnableStatus:
    """One runnable, as ``Supervisor.status()`` reports it."""

    dn: str
    """Its distinguished name, e.g. ``root.role.kubernetes``."""
    state: State
    """Its current state."""
    restarts: int
    """How many times it was restarted (for any reason) since its parent last started it."""
    failures: int
    """How many times it died (state DEAD) since its parent last started it."""
    last_error: RunnableError | None
    """Why it last died, if it ever did."""
    since: float
    """Wall-clock time of its last state change."""
    crash_looping: bool
    """Whether it died at least ``threshold`` times within the crash-loop window."""
    restart_in: float | None
    """Seconds left of the backoff before it starts again, if it is waiting."""
    note: str
    """What the runnable last said about itself with ``ctx.set_note``; empty if nothing.

    For a final failure: the ``FinalError``'s message (what is wrong, what to do)."""
    final: bool = False
    """Whether it is DEAD of a ``FinalError`` and waits for the operator to restart it."""

    @property
    def name(self) -> str:
        """The last component of the DN."""
        return self.dn.rpartition(".")[2]

    @property
    def depth(self) -> int:
        """0 for ``root``, 1 for its children, ..."""
        return self.dn.count(".")


class RunContext:
    """The handle a runnable gets: its DN, logger, children and signals.

    A context belongs to one run of one runnable; after a restart the runnable gets a new
    one, and calls through the old one raise ``SupervisorError``.
    """

    __slots__ = ("_generation", "_node", "_supervisor")

    def __init__(self, supervisor: Supervisor, node: Node, generation: int) -> None:
        self._supervisor = supervisor
        self._node = node
        self._generation = generation

    @property
    def dn(self) -> str:
        """This runnable's distinguished name."""
        return self._node.dn

    @property
    def log(self) -> logging.Logger:
        """A standard logger named after the DN; its records land in the log tree."""
        return self._node.log

    @property
    def done(self) -> bool:
        """Whether this run has called ``signal_done()``."""
        return self._node.signaled_done

    @property
    def clock(self) -> Clock:
        """The node's clock: wait a duration with ``await ctx.clock.sleep(seconds)`` and
        read time with ``ctx.clock.now()`` (``wall()`` for what is due at a date).

        Not ``anyio.sleep``: in a plugin's tests the test kit runs the node on a fake
        clock, and only a wait on this one moves when the test advances it (a backup
        every hour then costs no real time). Timeouts of real I/O (a peer that must
        answer within 5 s) stay on ``anyio``: no fake clock can make a peer answer.
        """
        return self._supervisor.clock

    @property
    def supervisor(self) -> Supervisor:
        """The supervisor running this runnable: for introspection (``status``) and for
        restarting others (``restart``), as the node management service does."""
        return self._supervisor

    def run(self, name: str, runnable: Runnable) -> None:
        """Start one child, in a group of its own. Only before ``signal_healthy()``.

        The child starts asynchronously: this returns before it runs.

        :raises InvalidRunnableNameError: if ``name`` is not ``^[a-z0-9_]{1,64}$`` or taken.
        :raises ChildrenAfterHealthyError: if this runnable already signalled healthy.
        """
        self.run_group({name: runnable})

    def run_group(self, runnables: Mapping[str, Runnable]) -> None:
        """Start children as one group: when one dies, the others are cancelled with it.

        Each restarts on its own once its subtree has stopped: the dead one after its
        backoff, the others at once. Only before ``signal_healthy()``.

        :raises InvalidRunnableNameError: if a name is invalid or taken.
        :raises ChildrenAfterHealthyError: if this runnable already signalled healthy.
        """
        self._supervisor._start_children(self._checked(), runnables)

    def signal_healthy(self) -> None:
        """Declare this runnable healthy: it started what it needed. Resets its backoff.

        :raises InvalidSignalError: unless the runnable is NEW (it may signal once).
        """
        self._supervisor._signal_healthy(self._checked())

    def signal_done(self) -> None:
        """Declare that this runnable will return and must not be restarted for it.

        It becomes DONE when it returns; its children keep running. Resets its backoff.

        :raises InvalidSignalError: unless the runnable is HEALTHY and not yet done.
        """
        self._supervisor._signal_done(self._checked())

    def set_note(self, note: str) -> None:
        """Say, in a few words, what this runnable is doing (shown in status).

        For example ``"waiting for approval"``. Cleared on restart.
        """
        self._supervisor._set_note(self._checked(), note)

    def restart(self) -> None:
        """Stop this runnable and its subtree, and start it again at once.

        For a runnable whose inputs changed in a way it cannot follow while running:
        cancels it (it becomes CANCELED, not DEAD, so no backoff applies), then starts it
        afresh as NEW once its subtree has stopped. The cancellation reaches the caller at
        its next checkpoint.
        """
        self._supervisor._restart(self._checked())

    def _checked(self) -> Node:
        node = self._node
        if node.generation != self._generation:
            raise SupervisorError(
                f"{node.dn}: this RunContext belongs to an earlier run of the runnable"
            )
        return node
