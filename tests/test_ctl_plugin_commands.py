"""Plugins' ``ctl`` sub-commands (entry-point group ``roleserve.ctl``): listed by name,
loaded only when run, parsed by the plugin's own parser with the connection options given
before the name, and a broken one fails in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from roleserve_core.cli import main
from roleserve_core.cli._installed import EntryPoint
from roleserve_core.cli.ctl import _plugin_commands
from roleserve_core.cli.ctl._plugin_commands import GROUP

PLUGIN = """
import sys

def add_parsers(commands):
    parser = commands.add_parser("hello", help="say hello", description="Say hello.")
    parser.add_argument("--name", required=True)
    parser.set_defaults(handler=lambda args: print(f"hello {args.name}, {args.timeout}") or 0)

def add_nodes(commands):
    raise AssertionError("a plugin's command of a core name is never loaded")

def add_nothing(commands):
    pass
"""


@pytest.fixture(autouse=True)
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry points of a plugin module ``ctl_plugin_probe``, and nothing else."""
    module = "ctl_plugin_probe"
    (tmp_path / f"{module}.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    points = [
        EntryPoint("hello", f"{module}:add_parsers", "probe"),
        EntryPoint("nodes", f"{module}:add_nodes", "probe"),
        EntryPoint("broken", "no_such_module_here:add", "probe"),
        EntryPoint("empty", f"{module}:add_nothing", "probe"),
    ]

    def entry_points(group: str) -> list[EntryPoint]:
        return points if group == GROUP else []

    monkeypatch.setattr(_plugin_commands, "entry_points", entry_points)


def test_help_lists_a_plugins_command_without_loading_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["ctl", "--help"])
    out = capsys.readouterr().out
    assert "hello" in out
    assert "`roleserve ctl hello --help` says more" in out
    assert "ctl_plugin_probe" not in sys.modules


def test_it_runs_with_its_own_arguments_and_the_options_before_its_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["ctl", "--timeout", "3", "hello", "--name", "you"]) == 0
    assert capsys.readouterr().out == "hello you, 3.0\n"


def test_a_core_name_stays_the_cores() -> None:
    with pytest.raises(SystemExit):
        main(["ctl", "nodes", "--help"])
    assert "ctl_plugin_probe" not in sys.modules


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("broken", "the plugin command 'broken' (no_such_module_here:add) failed to load: "),
        ("empty", "the plugin command 'empty' (ctl_plugin_probe:add_nothing) registers no"),
    ],
)
def test_a_broken_plugin_command_fails_in_one_line(
    name: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ctl", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"roleserve ctl: error: {says}")
    assert err.count("\n") == 1
