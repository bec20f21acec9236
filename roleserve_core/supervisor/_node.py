"""One node of the supervision tree: a runnable, its state, its children and its groups.

A ``Node`` lives as long as its parent's current run: restarting the node keeps the node
(and with it the backoff, the restart counter and the failure history), while restarting
its parent discards it and the parent's new run creates a fresh one.

Invariant kept by the supervisor: ``busy`` is the number of nodes in this node's subtree
(itself included) whose code has not finished. A subtree with ``busy == 0`` has fully
drained and may be restarted as a whole.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import anyio

from roleserve_core.supervisor._api import Runnable, RunnableError, State
from roleserve_core.supervisor._backoff import Backoff, BackoffPolicy

__all__ = ["Node"]


class Node:
    """State of one runnable; owned and mutated only by the ``Supervisor``."""

    __slots__ = (
        "backoff",
        "busy",
        "children",
        "dn",
        "failure_times",
        "failures",
        "final",
        "generation",
        "group",
        "last_error",
        "log",
        "name",
        "note",
        "parent",
        "pending_delay",
        "restart_at",
        "restarts",
        "runnable",
        "scope",
        "signaled_done",
        "since",
        "state",
    )

    name: str
    parent: Node | None
    dn: str
    state: State
    since: float
    scope: anyio.CancelScope
    children: dict[str, Node]
    signaled_done: bool
    note: str
    restart_at: float | None
    final: bool
    """Whether its last run failed with a ``FinalError``: it waits for the operator."""
    pending_delay: float
    """The backoff its restart waits, drawn when it died (the failure's log line says it)."""

    def __init__(
        self,
        name: str,
        parent: Node | None,
        runnable: Runnable,
        policy: BackoffPolicy,
        log: logging.Logger,
    ) -> None:
        self.name = name
        self.parent = parent
        self.dn = name if parent is None else f"{parent.dn}.{name}"
        self.runnable = runnable
        self.log = log
        self.backoff = Backoff(policy)
        self.restarts = 0
        self.failures = 0
        self.failure_times: deque[float] = deque()
        self.last_error: RunnableError | None = None
        self.generation = 0
        self.busy = 0
        self.group: list[Node] = [self]
        self._fresh_run()

    def _fresh_run(self) -> None:
        self.state = State.NEW
        self.since = time.time()
        self.scope = anyio.CancelScope()
        self.children = {}
        self.signaled_done = False
        self.note = ""
        self.restart_at: float | None = None
        self.final = False
        self.pending_delay = 0.0

    def reset(self) -> None:
        """Prepare a new run: new cancel scope, no children, state NEW.

        The old children are discarded, so their contexts must go stale as well: a
        ``RunContext`` kept from one of their runs could otherwise restart a node that is no
        longer in the tree, which nothing would ever cancel (shutdown would hang on it).
        """
        for discarded in self.walk()[1:]:
            discarded.generation += 1
        self.generation += 1
        self.restarts += 1
        self._fresh_run()

    @property
    def cancelled(self) -> bool:
        """Whether this run was asked to stop (by itself, an ancestor or a sibling)."""
        return self.scope.cancel_called

    def ancestors(self) -> list[Node]:
        """This node, then its parent, up to the root."""
        chain: list[Node] = []
        node: Node | None = self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain

    def walk(self) -> list[Node]:
        """This node and all its descendants, parents before children."""
        out: list[Node] = []
        stack = [self]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children.values()))
        return out
