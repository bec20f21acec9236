"""How the ``roleserve`` command fails: one line for a refusal, a traceback for a bug.

A refusal (a ``RoleserveError``: a bad flag value, a cluster that says no, a node that
exits) is one line, ``roleserve COMMAND: error: ...``. Anything else is a bug, and its
traceback is what its reporter needs. ``--debug`` (or ``ROLESERVE_DEBUG=1``, which
``--debug`` sets, so the node processes ``cluster up`` starts inherit it) prints the
traceback of refusals too.

Errors raised inside an anyio task group reach the command wrapped in an
``ExceptionGroup``, often nested, beside the cancellations they caused. ``sole_error``
unwraps such a group back to the one error it stands for, so the command's own
``except RoleserveError`` sees it; a group of several unrelated failures stays a group.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator

from roleserve_core.environment import DEBUG_ENV
from roleserve_core.errors import RoleserveError, leaf_exceptions

__all__ = ["DEBUG_ENV", "debugging", "discard_stdout", "report", "sole_error"]


def debugging() -> bool:
    """Whether refusals should show their traceback (``--debug``, ``$ROLESERVE_DEBUG``)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def report(prog: str, error: BaseException | str) -> None:
    """Print ``prog: error: MESSAGE`` on stderr, after the traceback when debugging."""
    if isinstance(error, BaseException) and debugging():
        hidden = error.__context__ if error.__suppress_context__ else None
        if hidden is not None:  # the original failure a refusal was made from
            traceback.print_exception(hidden, file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
    print(f"{prog}: error: {error}", file=sys.stderr)


@contextlib.contextmanager
def sole_error() -> Iterator[None]:
    """Re-raise the one error an exception group raised in the block stands for.

    Cancellations are the group's consequences, not its cause, and are left out. Of several
    refusals the first is raised: the rest are what it set off (a node that exits fails
    every wait on it). A group holding anything else besides is re-raised as it is.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        cause = _cause(group)
        if cause is None:
            raise
        raise cause from None


def _cause(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    import asyncio  # here: a command that does not fail need not load it

    leaves = leaf_exceptions(group)
    causes = [leaf for leaf in leaves if not isinstance(leaf, asyncio.CancelledError)] or leaves
    if len(causes) == 1:
        return causes[0]
    if all(isinstance(cause, RoleserveError | KeyboardInterrupt) for cause in causes):
        return causes[0]
    return None


def discard_stdout() -> None:
    """Point stdout at /dev/null: its reader went away (``ctl logs -f | head``,
    ``cluster status --json | head``), there is nothing left to say to it, and Python's own
    flush of the closed pipe at exit would print a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is no file (captured): nothing will flush into a closed pipe
    finally:
        os.close(devnull)
