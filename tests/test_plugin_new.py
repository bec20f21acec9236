"""``roleserve plugin new``: what it refuses, what it writes, and that what it writes works.

The proof is the last test: the generated distribution, installed into a fresh virtual
environment beside roleserve-core's wheel and nothing else of the workspace, passes its
own tests and loads as a plugin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from roleserve_core.cli import main
from roleserve_core.cli.plugin_new import MAX_NAME
from roleserve_core.plugin_loader import PLUGIN_API_VERSION
from roleserve_core.testing import require_real
from roleserve_core.version import core_version

REPOSITORY = Path(__file__).resolve().parents[1]

LONGEST = "a_long_name_of_24_chars"  # MAX_NAME (24) characters
assert len(LONGEST) <= MAX_NAME


def new(*argv: str) -> int:
    return main(["plugin", "new", *argv])


def files_under(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


@pytest.mark.parametrize(
    ("name", "complaint"),
    [
        ("Backup", "invalid plugin name 'Backup': use lower case letters"),
        ("backup-agent", "invalid plugin name 'backup-agent'"),
        ("1backup", "invalid plugin name '1backup'"),
        ("backup_", "invalid plugin name 'backup_'"),
        ("back__up", "invalid plugin name 'back__up'"),
        ("", "invalid plugin name ''"),
        ("a" * (MAX_NAME + 1), f"at most {MAX_NAME} characters"),
        ("core", "invalid plugin name 'core': a built-in plugin has it"),
    ],
)
def test_a_name_that_cannot_be_a_plugin_is_refused_before_writing(
    name: str, complaint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert new(name, "--dir", str(tmp_path / "plugin")) == 2
    error = capsys.readouterr().err
    assert error.startswith("roleserve plugin new: error: ")
    assert complaint in error
    assert error.count("\n") == 1
    assert files_under(tmp_path) == []


def test_a_role_that_cannot_be_a_custom_role_is_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert new("backup", "--role", "Nightly Backup", "--dir", str(tmp_path / "plugin")) == 2
    assert "--role: invalid custom role name 'Nightly Backup'" in capsys.readouterr().err
    assert files_under(tmp_path) == []


def test_an_existing_directory_is_never_written_into(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my own\n")
    assert new("backup", "--dir", str(mine)) == 2
    assert f"{mine} exists, and plugin new never writes into an existing directory" in (
        capsys.readouterr().err
    )
    assert files_under(mine) == ["README.md"]
    assert (mine / "README.md").read_text() == "my own\n"


def test_the_distribution_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert new("backup_agent", "--role", "nightly-backup") == 0
    plugin = tmp_path / "roleserve-backup-agent"  # the default directory
    assert files_under(plugin) == [
        ".gitignore",
        "CHANGELOG.md",
        "README.md",
        "pyproject.toml",
        "roleserve_backup_agent",
        "roleserve_backup_agent/__init__.py",
        "roleserve_backup_agent/hooks.py",
        "roleserve_backup_agent/py.typed",
        "roleserve_backup_agent/values.py",
        "roleserve_backup_agent/worker_backup_agent.py",
        "tests",
        "tests/test_backup_agent.py",
    ]
    project = tomllib.loads((plugin / "pyproject.toml").read_text())
    major, minor = (int(part) for part in core_version().split(".")[:2])
    core = f"roleserve-core>={major}.{minor},<{major + 1}"
    assert project["project"]["name"] == "roleserve-backup-agent"
    assert project["project"]["dependencies"] == [core]
    assert project["project"]["entry-points"]["roleserve.plugins"] == {
        "backup_agent": "roleserve_backup_agent.hooks"
    }
    assert core in project["dependency-groups"]["test"]
    hooks = (plugin / "roleserve_backup_agent" / "hooks.py").read_text()
    assert f"\nROLESERVE_PLUGIN_API = {PLUGIN_API_VERSION}\n" in hooks
    worker = (plugin / "roleserve_backup_agent" / "worker_backup_agent.py").read_text()
    assert '\nROLE = "nightly-backup"\n' in worker
    assert "custom:nightly-backup" in (plugin / "README.md").read_text()


def test_its_readme_develops_outside_the_repository_as_the_plugin_guide_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin's directory is outside the repository, where uv is often not on PATH:
    its README used plain ``uv venv``. It repeats the guide's steps, with the uv of a
    roleserve checkout beside it, and says what to do without uv."""
    monkeypatch.chdir(tmp_path)
    assert new("backup_agent", "--role", "nightly-backup") == 0
    readme = (tmp_path / "roleserve-backup-agent" / "README.md").read_text()
    guide = (REPOSITORY / "docs" / "plugin-guide.md").read_text()
    section = guide.split("## Developing a plugin outside the repository")[1].split("\n## ")[0]
    steps = [line.split("  #")[0].strip() for line in section.splitlines()]
    shell = [step for step in steps if step.startswith(("../roleserve/dev uv", ".venv/bin/"))]
    assert "../roleserve/dev uv venv" in shell
    for step in shell:
        assert step.replace("NAME", "backup_agent").replace("ROLE", "nightly-backup") in readme, (
            step
        )
    commands = [line for line in readme.splitlines() if line.startswith(("uv ", "pip "))]
    assert commands == []
    assert "python3 -m venv .venv" in readme


def test_what_it_writes_is_clean_for_ruff_and_mypy_even_with_the_longest_names(
    tmp_path: Path,
) -> None:
    """Names are substituted into code: the longest must still fit the line length."""
    plugin = tmp_path / "plugin"
    assert new(LONGEST, "--role", "r" * 63, "--dir", str(plugin)) == 0
    tools = Path(sys.executable).parent
    for command in (["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]):
        done = subprocess.run(
            [str(tools / command[0]), *command[1:]],
            cwd=plugin,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}{done.stderr}"


def find_uv() -> str | None:
    """uv on PATH, else where ``./dev`` installs it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    installed = cache / "roleserve" / "uv" / "bin" / "uv"
    return shutil.which("uv") or (str(installed) if installed.exists() else None)


def run(*command: str | Path, cwd: Path) -> str:
    """Run ``command``, failing the test with its output if it fails."""
    environment = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.mark.timeout(600)
def test_what_it_writes_passes_its_tests_with_the_core_wheel_only(tmp_path: Path) -> None:
    uv = find_uv()
    require_real("uv", uv, "./dev installs it; or pip install uv")
    assert uv is not None
    plugin = tmp_path / "plugin"
    assert new("backup", "--dir", str(plugin)) == 0
    run(uv, "build", "--quiet", "--wheel", "--out-dir", tmp_path / "dist", REPOSITORY, cwd=tmp_path)
    (core_wheel,) = (tmp_path / "dist").glob("roleserve_core-*.whl")
    venv = tmp_path / "venv"
    run(uv, "venv", "--quiet", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    test_group = f"{plugin / 'pyproject.toml'}:test"
    install: list[str | Path] = ["pip", "install", "--quiet", "--python", python]
    run(uv, *install, core_wheel, plugin, "--group", test_group, cwd=tmp_path)

    assert "8 passed" in run(venv / "bin" / "pytest", "-p", "no:cacheprovider", cwd=plugin)
    listing = run(venv / "bin" / "roleserve", "plugins", "--strict", cwd=tmp_path)
    assert "roleserve-backup" in listing
