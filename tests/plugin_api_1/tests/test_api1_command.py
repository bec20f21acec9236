"""The plugin written for plugin API 1, installed, seen by the ``roleserve`` command.

Not part of the frozen suite: the command's view of it is the core's, checked here as the
core changes. A node imports its plugins as ``roleserve plugins`` does.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

MOVED = [
    f"roleserve_core.keys.{name} has moved: import {name} from roleserve_core; the old name "
    "works while roleserve-core accepts plugin API 1"
    for name in ("CLUSTER_NODES", "NODE_ID", "ROLES")
]
"""What its hooks module imports from where plugin API 1 put it, each said once."""
HOOKS = Path("tests/plugin_api_1/roleserve_api1/hooks.py")


def plugins_command(installed: list[Path], *argv: str) -> subprocess.CompletedProcess[str]:
    """``roleserve plugins ARGV`` (or another command) in another process that has only this
    plugin installed."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROLESERVE_")}
    environ["ROLESERVE_PLUGINS"] = "api1"
    environ["PYTHONPATH"] = os.pathsep.join(map(str, installed))
    command = list(argv) if argv[:1] == ("node",) else ["plugins", *argv]
    return subprocess.run(
        [sys.executable, "-m", "roleserve_core", *command],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )


def test_roleserve_plugins_loads_it_strictly(installed: list[Path]) -> None:
    """Loaded, with its workers and values, and ``--strict`` passes: its deprecated imports
    are not load errors, but its warnings, each once (Python alone would show a
    DeprecationWarning outside ``__main__`` to nobody, so its operator never learnt)."""
    done = plugins_command(installed, "--json", "--strict")
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
    assert api1["warnings"] == MOVED


def test_roleserve_plugins_lists_its_deprecated_imports_under_it(installed: list[Path]) -> None:
    done = plugins_command(installed)
    assert (done.returncode, done.stderr) == (0, "")
    after = done.stdout.split("\napi1: ", 1)[1].splitlines()[1:]
    listed = itertools.takewhile(lambda line: line.startswith("  "), after)  # api1's lines
    assert [line for line in listed if "warning" in line] == [
        f"  warning: {message}" for message in MOVED
    ], done.stdout


def test_the_node_logs_each_deprecated_import_once(installed: list[Path], tmp_path: Path) -> None:
    """A node loads its plugins before anything else (here it then stops: the data directory
    holds no membership, nor a ticket to get one): each old name its plugin imports is one
    WARNING line of its log, naming the old place and the new."""
    log = tmp_path / "node.log"
    done = plugins_command(
        installed, "node", "run", "--data-dir", str(tmp_path / "data"), "--log-file", str(log)
    )
    assert done.returncode == 2, done.stderr
    lines = log.read_text().splitlines()
    for message in MOVED:
        said = [line for line in lines if line.endswith(message)]
        assert len(said) == 1, lines
        assert " WARNING " in said[0]
        assert f"plugin 'api1' ({HOOKS}): {message}" in said[0]
