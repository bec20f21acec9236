"""``cli._lazy``: sub-commands listed from a table, each built when chosen; the rest of the
commands (``more``) registered only when every name is needed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest

from roleserve_core.cli._lazy import LazyCommand, add_lazy_subparsers

MODULE = "lazy_probe_commands"
SOURCE = """
def add_parsers(commands):
    parser = commands.add_parser("hello", help="ignored: the table's line is listed")
    parser.add_argument("--name", required=True)
    parser.set_defaults(said="hello")

def add_nothing(commands):
    pass
"""


MORE_CALLS: list[str] = []
"""Each ``more`` run."""


def more(commands: Any) -> None:
    commands.add_parser("extra", help="added when every name is needed")
    MORE_CALLS.append("extra")


@pytest.fixture
def parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    parser = argparse.ArgumentParser(prog="probe")
    MORE_CALLS.clear()
    add_lazy_subparsers(
        parser,
        [
            LazyCommand("hello", "say hello", f"{MODULE}:add_parsers"),
            LazyCommand("broken", "registers nothing", f"{MODULE}:add_nothing"),
        ],
        more=more,
        title="commands",
        metavar="COMMAND",
    )
    return parser


def test_the_listing_imports_nothing_and_shows_every_line(
    parser: argparse.ArgumentParser,
) -> None:
    listing = parser.format_help()
    assert "hello     say hello" in listing
    assert "extra     added when every name is needed" in listing
    assert MODULE not in sys.modules


def test_a_chosen_command_is_built_by_its_module(parser: argparse.ArgumentParser) -> None:
    args = parser.parse_args(["hello", "--name", "you"])
    assert (args.said, args.name) == ("hello", "you")
    assert MODULE in sys.modules
    assert MORE_CALLS == []


def test_an_unknown_name_is_refused_with_every_name(
    parser: argparse.ArgumentParser, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parser.parse_args(["nosuch"])
    assert "(choose from 'hello', 'broken', 'extra')" in capsys.readouterr().err
    assert parser.parse_args(["extra"]).__dict__ == {}


def test_a_module_that_registers_nothing_is_a_bug_said_as_such(
    parser: argparse.ArgumentParser,
) -> None:
    with pytest.raises(RuntimeError, match="registers no command 'broken'"):
        parser.parse_args(["broken"])
