"""What kind of failure a runnable's exception is: the one place that decides.

::

    exception ──classify_failure──▶ FINAL       stays DEAD until the operator restarts it;
                                                one ERROR line, no traceback
                                    EXPECTED    restarts after the backoff;
                                                one WARNING line, no traceback (a
                                                ResourceError: one ERROR line that
                                                starts with WAITING_FOR_OPERATOR)
                                    UNEXPECTED  restarts after the backoff;
                                                ERROR with the traceback (a bug, or a case
                                                nobody thought of: the traceback is needed)

Whatever the kind, the full traceback is kept in the runnable's last error (``ctl tree``).

The rules, in order:

1. A ``FinalError`` anywhere in the failure (a runnable's task group may wrap it) is final.
2. A failure is expected when every exception in it is: an ``ExpectedError`` (code marks its
   own errors so), a refused or reset connection (``ConnectionError``), a full disk (an
   OSError ENOSPC or EDQUOT: a refusal of the environment, not a bug; logged as the
   ``ResourceError`` ``files.DiskFullError``, naming the file if the OSError does), or a
   gRPC call that ended ``UNAVAILABLE`` (no server, the leader restarting, the connection
   dropped) or ``CANCELLED`` (its channel closed under it when the connection followed a
   new leader).
3. Everything else is unexpected.

gRPC is looked up in ``sys.modules`` rather than imported: a process that never imported
grpc cannot have raised its errors, and the supervisor stays cheap to import.
"""

from __future__ import annotations

import enum
import sys

from roleserve_core.errors import ExpectedError, FinalError, ResourceError, leaf_exceptions
from roleserve_core.files import disk_full_error

__all__ = [
    "FAILED_FOR_GOOD",
    "WAITING_FOR_OPERATOR",
    "FailureKind",
    "classify_failure",
    "final_cause",
    "resource_cause",
]

FAILED_FOR_GOOD = "failed for good, not restarting: "
"""How the log line of a final failure starts (its message follows)."""

WAITING_FOR_OPERATOR = "waiting for the operator: "
"""How the log line of a ``ResourceError`` starts (its message follows): tools that watch a
node's log, such as ``cluster up``, stop waiting on a node that says it."""

EXPECTED_GRPC_CODES = frozenset({"UNAVAILABLE", "CANCELLED"})
"""Names of the ``grpc.StatusCode`` values whose calls failed for a reason that passes."""


class FailureKind(enum.Enum):
    """How the supervisor treats a runnable's failure (see the module docstring)."""

    FINAL = "final"
    EXPECTED = "expected"
    UNEXPECTED = "unexpected"


def classify_failure(error: BaseException) -> FailureKind:
    """The kind of ``error``, a runnable's failure (see the module docstring for the rules)."""
    if final_cause(error) is not None:
        return FailureKind.FINAL
    if all(_expected(leaf) for leaf in leaf_exceptions(error)):
        return FailureKind.EXPECTED
    return FailureKind.UNEXPECTED


def final_cause(error: BaseException) -> FinalError | None:
    """The first ``FinalError`` in ``error`` (itself, or inside its exception groups)."""
    for leaf in leaf_exceptions(error):
        if isinstance(leaf, FinalError):
            return leaf
    return None


def resource_cause(error: BaseException) -> ResourceError | None:
    """The first ``ResourceError`` in ``error`` (itself, or inside its exception groups),
    a full disk's OSError as a ``DiskFullError``."""
    for leaf in leaf_exceptions(error):
        if isinstance(leaf, ResourceError):
            return leaf
        full = disk_full_error(leaf)
        if full is not None:
            return full
    return None


def _expected(error: BaseException) -> bool:
    if isinstance(error, ExpectedError | ConnectionError) or disk_full_error(error):
        return True
    return _grpc_code(error) in EXPECTED_GRPC_CODES


def _grpc_code(error: BaseException) -> str | None:
    """The status code name of a gRPC call's error, or None if ``error`` is not one."""
    grpc = sys.modules.get("grpc")
    if grpc is None or not isinstance(error, grpc.RpcError):
        return None
    code = getattr(error, "code", None)
    status = code() if callable(code) else None
    name = getattr(status, "name", None)
    return name if isinstance(name, str) else None
