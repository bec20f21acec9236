"""How the person at the terminal runs ``roleserve``, for the commands we suggest to them.

The hints we print ("operate it with ...", the command ``ctl ticket`` gives a new node)
must paste as they are, so they name the command the way it was run::

    $ROLESERVE_COMMAND set ─────────────────▶ it (./dev sets "./dev roleserve")
    run as roleserve, found so on PATH ─────▶ roleserve
    run by a path (.venv/bin/roleserve) ────▶ that path, as typed
    python -m roleserve_core ───────────────▶ /path/to/python -m roleserve_core
    anything else (main() in a test) ───────▶ roleserve
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from roleserve_core.environment import COMMAND_ENV

__all__ = ["COMMAND_ENV", "roleserve_command"]

NAME = "roleserve"


def roleserve_command(argv0: str | None = None) -> str:
    """The command that runs ``roleserve`` here (see the module docstring).

    :param argv0: the program as started; ``sys.argv[0]`` by default.
    """
    given = os.environ.get(COMMAND_ENV, "").strip()
    if given:
        return given
    program = sys.argv[0] if argv0 is None else argv0
    path = Path(program)
    if path.name == "__main__.py" and path.parent.name == "roleserve_core":
        return f"{shlex.quote(sys.executable)} -m roleserve_core"
    if path.name != NAME or os.sep not in program or _on_path(path):
        return NAME
    return shlex.quote(program)


def _on_path(program: Path) -> bool:
    """Whether ``roleserve`` typed alone runs ``program``."""
    found = shutil.which(NAME)
    return found is not None and Path(found).resolve() == program.resolve()
