"""How ``roleserve ctl`` fails: one line on stderr and an exit code that says whose fault.

::

    exit 0  done
    exit 1  the cluster refused or could not be reached (a gRPC status, no leader, an
            unknown node, a question answered "no")
    exit 2  the command cannot be run as given (credentials, arguments, an ambiguous node
            prefix, a confirmation that stdin cannot give)
    exit 130  interrupted (Ctrl-C), except where following is the point (``logs -f``): 0

Every failure becomes a ``CtlError`` before it reaches the handler, so the handler has one
place that prints and never shows a traceback. The server's own message is kept word for
word: it usually says what to do (the curator writes its refusals for operators).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roleserve_core._public import publish
from roleserve_core.errors import RoleserveError

if TYPE_CHECKING:
    import grpc

__all__ = ["EXIT_INTERRUPTED", "EXIT_REFUSED", "EXIT_USAGE", "CtlError", "rpc_failure"]

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""128 + SIGINT, as shells report a command stopped by Ctrl-C."""


class CtlError(RoleserveError):
    """A failure to report in one line, with the exit code to leave with."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def rpc_failure(what: str, error: grpc.aio.AioRpcError) -> CtlError:
    """``what`` failed with ``error``: the server's message, then its status code, which a
    script or a search for the code can use."""
    details = error.details() or "no details"
    return CtlError(f"{what}: {details} ({error.code().name})", EXIT_REFUSED)


# Exported by roleserve_core (ctl_extension) as CtlError: reported there, not here (see _public;
# ctl is no public package whose end could say so, and ctl_extension is imported only by plugins).
publish("roleserve_core", {"CtlError": CtlError}, ["CtlError"])
