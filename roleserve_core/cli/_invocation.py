"""How the person at the terminal runs ``roleserve``, for the commands we suggest to them.

Installed with pip, it is ``roleserve``. Run from a checkout through ``./dev roleserve``,
there is no ``roleserve`` on the PATH, so ``./dev`` says so in ``$ROLESERVE_COMMAND`` and
the hints we print ("operate it with ...") can be pasted as they are.
"""

from __future__ import annotations

import os

__all__ = ["COMMAND_ENV", "roleserve_command"]

COMMAND_ENV = "ROLESERVE_COMMAND"


def roleserve_command() -> str:
    """The command that runs ``roleserve`` here: ``$ROLESERVE_COMMAND``, else ``roleserve``."""
    return os.environ.get(COMMAND_ENV, "").strip() or "roleserve"
