"""The plugin written for plugin API 1, installed, seen by the ``roleserve`` command.

Not part of the frozen suite: the command's view of it is the core's, checked here as the
core changes. A node imports its plugins as ``roleserve plugins`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_roleserve_plugins_loads_it_strictly(installed: list[Path]) -> None:
    """Loaded, with its workers and values, and ``--strict`` passes: its deprecated imports
    are not load errors. Python shows no DeprecationWarning outside ``__main__`` unless
    asked, so an operator's terminal stays quiet; its author's tests see them."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROLESERVE_")}
    environ["ROLESERVE_PLUGINS"] = "api1"
    environ["PYTHONPATH"] = os.pathsep.join(map(str, installed))
    done = subprocess.run(
        [sys.executable, "-m", "roleserve_core", "plugins", "--json", "--strict"],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    (api1,) = [entry for entry in json.loads(done.stdout) if entry["name"] == "api1"]
    assert (api1["state"], api1["distribution"], api1["error"]) == (
        "loaded",
        "roleserve-api1",
        None,
    )
    assert (api1["workers"], api1["values"]) == (
        ["api1", "api1_neighbours"],
        ["api1_greeting", "api1_neighbours"],
    )
