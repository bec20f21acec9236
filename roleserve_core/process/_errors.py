"""What can go wrong when running a program, in one tree.

::

    RoleserveError
    └── ProgramError                  a program could not be started, or stopped running
        ├── ProgramNotFoundError      no executable binary (the paths tried, the setting to
        │                             change), or no util-linux setpriv: restarting cannot help
        ├── PortInUseError            an address the program will bind is held by a process
        │                             this node did not start (address, holder's pid, command)
        └── ProgramExitedError        the program ended by itself (exit status, last error lines)

``ProgramNotFoundError`` is also a ``FinalError``: the supervisor does not restart a
runnable that raises it, and the node shows it as final until the operator acts.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from roleserve_core.errors import FinalError, RoleserveError

__all__ = ["PortInUseError", "ProgramError", "ProgramExitedError", "ProgramNotFoundError"]


class ProgramError(RoleserveError):
    """A program could not be started, or stopped running; the message says which and why."""


class ProgramNotFoundError(ProgramError, FinalError):
    """No executable binary for a program (or no ``setpriv`` to start it with).

    The message names every path tried and the setting to change. Restarting cannot fix
    it, so it is a final error, not a reason to crash-loop.
    """


class PortInUseError(ProgramError):
    """An address the program will bind is already held by a process the node did not start.

    The message names the address, the holder's pid and command when readable, and what to
    do. The holder is never signalled: it is not provably ours.
    """

    def __init__(self, message: str, *, address: str, holder_pid: int | None) -> None:
        super().__init__(message)
        self.address = address
        """The address held, as ``host:port/protocol``."""
        self.holder_pid = holder_pid
        """The pid of the process holding it, if this node can see it."""


class ProgramExitedError(ProgramError):
    """The program ended without being asked to stop.

    Carries its exit status and its last error lines (or, if it logged no error, its last
    lines of output), which make up the message, so they become the runnable's error.
    """

    def __init__(self, name: str, returncode: int, lines: Sequence[str]) -> None:
        self.name = name
        """The program's name (``ProgramSpec.name``)."""
        self.returncode = returncode
        """Its exit status; negative: killed by that signal (as ``subprocess`` reports it)."""
        self.lines = tuple(lines)
        """Its last error lines, oldest first (or its last lines of output if none)."""
        super().__init__(
            f"{name} {describe_status(returncode)}: " + ("; ".join(lines) or "no output")
        )


def describe_status(returncode: int) -> str:
    """``exited with status 1`` or ``ended by signal SIGKILL``."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"ended by signal {name}"
