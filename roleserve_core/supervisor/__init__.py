"""A supervision tree of runnables, after Monogon's supervisor.

A *runnable* is ``async def run(ctx: RunContext) -> None``. The supervisor runs a tree of
them, each named by its DN (``root.role.kubernetes.worker``), and keeps the tree running::

    root ──────────────────────────── runs, may start children before healthy
    ├── role                          run_group({...}) starts a *group*:
    │   ├── kubernetes ┐ group A      when one member dies, the others are cancelled
    │   └── hostsfile  ┘              (siblings in other groups are not affected)
    └── hooks

    NEW ──signal_healthy()──▶ HEALTHY ──signal_done(), return──▶ DONE
     │                          │
     └────── raise / return without done ──▶ DEAD ──(backoff)──▶ NEW
                 raise FinalError ──▶ DEAD, final ──(restart(dn) by the operator)──▶ NEW
                 cancelled by ancestor or sibling ──▶ CANCELED ──(at once)──▶ NEW

Rules (Monogon's ``osbase/supervisor``: its node states and its restart loop):

- A runnable that raises, or returns without having signalled done, is DEAD: its subtree
  and its group siblings are cancelled. The parent is not affected.
- Each cancelled node restarts on its own once its whole subtree has finished and its
  parent is still running: the dead one after an exponential backoff (0.5 s, ×1.5, up to
  60 s, ±50 % jitter; reset by healthy or done), the others at once.
- A runnable that raises a ``FinalError`` (restarting cannot fix it) is not restarted: it
  stays DEAD, marked final, its note the error's message, until ``restart(dn)``. Its
  siblings and parent are treated as for any death. ``Supervisor.final_failures`` tells
  the node process.
- Failures are logged by kind (``classify_failure``): final and expected ones as one line,
  unexpected ones with the traceback; the traceback is always in the last error. A final
  failure's line starts with ``FAILED_FOR_GOOD``, a ``ResourceError``'s (an expected failure
  only the operator can end, such as a full disk) with ``WAITING_FOR_OPERATOR``.
- Children are started only before the runnable signals healthy; a DONE runnable's children
  keep running.
- Cancellation is never swallowed: a runnable is cancelled by cancelling its scope, and the
  supervisor lets every cancellation it did not cause pass through.

Beyond Monogon: restart and failure counters, the last error with its traceback, time in
state, a crash-looping flag, notes a runnable sets about itself, ``restart(dn)``, and an
injectable clock so that tests drive backoff without waiting.

Modules: ``_api`` (what runnables see), ``_node`` (the tree node), ``_supervisor`` (the
state-owning logic), ``_backoff`` (restart delays), ``_failure`` (what kind a failure is),
``_retry`` (the same delays for a loop that retries inside a runnable), ``_lazy`` (a
runnable whose code is imported when it first runs).
"""

from roleserve_core._public import publish
from roleserve_core.supervisor._api import (
    RunContext,
    Runnable,
    RunnableError,
    RunnableStatus,
    State,
)
from roleserve_core.supervisor._backoff import Backoff, BackoffPolicy
from roleserve_core.supervisor._failure import (
    FAILED_FOR_GOOD,
    WAITING_FOR_OPERATOR,
    FailureKind,
    classify_failure,
)
from roleserve_core.supervisor._lazy import LazyRunnable, RunnableImportError, lazy_runnable
from roleserve_core.supervisor._retry import Retry, retry
from roleserve_core.supervisor._supervisor import (
    NAME_PATTERN,
    SUPERVISOR_DN,
    CrashLoopPolicy,
    StateObserver,
    Supervisor,
    SupervisorStatistics,
)

__all__ = [
    "FAILED_FOR_GOOD",
    "NAME_PATTERN",
    "SUPERVISOR_DN",
    "WAITING_FOR_OPERATOR",
    "Backoff",
    "BackoffPolicy",
    "CrashLoopPolicy",
    "FailureKind",
    "LazyRunnable",
    "Retry",
    "RunContext",
    "Runnable",
    "RunnableError",
    "RunnableImportError",
    "RunnableStatus",
    "State",
    "StateObserver",
    "Supervisor",
    "SupervisorStatistics",
    "classify_failure",
    "lazy_runnable",
    "retry",
]

# Its classes report this package (or the top level) as theirs: see _public.
publish(__name__, globals(), __all__)
