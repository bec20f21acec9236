"""Installs the frozen plugin of plugin API 1 for its own suite, as a distribution with its
entry point, for the length of each of its tests only.

Why not a member of the workspace, as examples/hello is: a member is installed in every
environment of the repository, so every ``roleserve plugins`` and every node of every test
would load a plugin that warns of its deprecated imports, under a suite that makes
warnings errors, and every listing of the installed plugins would gain it. Installed here,
it is a real distribution to ``importlib.metadata`` (its name, version and entry point
read from its own pyproject.toml) only while its tests run, and nowhere else.

Its package is importable from this directory (as an editable install makes it), so that
its suite imports it as it did when it was released.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from roleserve_core.plugin_loader import ENTRY_POINT_GROUP

HERE = Path(__file__).resolve().parent

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture(autouse=True)
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The distribution's metadata in a directory on ``sys.path``: what an editable install
    of it writes, so that the core finds the plugin through its entry point. Returns the
    directories to put on ``PYTHONPATH`` for another process to find it too."""
    project = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]
    site = tmp_path / "site-packages"
    dist_info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    entry_points = project["entry-points"][ENTRY_POINT_GROUP]
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n" + "".join(f"{n} = {t}\n" for n, t in entry_points.items())
    )
    monkeypatch.syspath_prepend(str(site))
    return [site, HERE]
