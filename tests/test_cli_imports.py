"""``roleserve --version`` and every ``--help`` answer at once: they import none of grpc,
protobuf, cryptography, pluggy or anyio, which only the work behind a command needs.

(How long they take is measured by ``benchmarks/cli.py``; this checks the cause.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roleserve_core.access import CHECKED_FILE
from roleserve_core.cli.ctl._last_leader import LEADER_FILE
from roleserve_core.identity import CA_FILE

HEAVY = ("grpc", "google.protobuf", "cryptography", "pluggy", "anyio")

PROBE = """
import json, sys
from roleserve_core.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = [name for name in {heavy!r} if name in sys.modules]
print(json.dumps(heavy), file=sys.stderr)
"""


def _loaded(modules: tuple[str, ...], *argv: str) -> list[str]:
    """Which of ``modules`` ``roleserve ARGV`` imported, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=modules), *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


def _heavy_modules_loaded(*argv: str) -> list[str]:
    return _loaded(HEAVY, *argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["ctl", "--help"],
        ["ctl", "nodes", "--help"],
        ["ctl", "logs", "--help"],
        ["cluster", "--help"],
        ["cluster", "up", "--help"],
        ["node", "run", "--help"],
        ["plugins", "--help"],
        ["plugin", "new", "--help"],
    ],
    ids=" ".join,
)
def test_help_and_version_load_nothing_heavy(argv: list[str]) -> None:
    assert _heavy_modules_loaded(*argv) == []


def test_a_refused_ctl_command_loads_no_grpc() -> None:
    """Without credentials ctl stops before it would call the cluster."""
    assert "grpc" not in _heavy_modules_loaded("ctl", "--credentials", "/nonexistent", "nodes")


COMMAND_MODULES = (
    "roleserve_core.cli.node",
    "roleserve_core.cli.cluster",
    "roleserve_core.cli.plugin_list",
    "roleserve_core.cli.plugin_new",
    "roleserve_core.cli.ctl",
    "roleserve_core.cli.ctl._command",
    "roleserve_core.cli.ctl._nodes",
    "roleserve_core.cli.ctl._logs",
    "roleserve_core.cli.ctl._plugin_commands",
    "roleserve_kubernetes",
    "roleserve_metrics",
)
"""What a command may import only when chosen: the commands' modules, and plugins."""


@pytest.mark.parametrize(
    ("argv", "imported"),
    [
        (["--version"], []),
        (["--help"], []),
        (["ctl", "--help"], ["roleserve_core.cli.ctl", "roleserve_core.cli.ctl._plugin_commands"]),
        (
            ["ctl", "nodes", "--help"],
            [
                "roleserve_core.cli.ctl",
                "roleserve_core.cli.ctl._command",
                "roleserve_core.cli.ctl._nodes",
            ],
        ),
        (["plugin", "new", "--help"], ["roleserve_core.cli.plugin_new"]),
    ],
    ids=lambda argv: " ".join(argv) if isinstance(argv, list) else "",
)
def test_only_the_chosen_command_is_imported(argv: list[str], imported: list[str]) -> None:
    """``--version`` and ``--help`` import no command module and no plugin; a command
    imports its own module alone (``ctl --help`` reads the plugins' entry points: their
    names, not their modules)."""
    assert _loaded(COMMAND_MODULES, *argv) == imported


def test_the_listings_show_every_command_with_its_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tables the listings come from (``COMMANDS``, ``SUBCOMMANDS``) name the modules
    that register those commands: each command's parser, once built, is the real one."""
    from roleserve_core.cli import COMMANDS, build_parser
    from roleserve_core.cli.ctl import SUBCOMMANDS

    monkeypatch.setenv("COLUMNS", "200")  # each help on one line
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    top = capsys.readouterr().out
    assert all(command.name in top and command.help in top for command in COMMANDS)
    for command in SUBCOMMANDS:
        with pytest.raises(SystemExit):
            build_parser().parse_args(["ctl", command.name, "--help"])
        assert f"usage: roleserve ctl {command.name} [-h]" in capsys.readouterr().out


def test_ctl_help_lists_the_installed_plugins_commands() -> None:
    """The kubernetes and metrics plugins' ``ctl`` commands (their ``roleserve.ctl`` entry
    points), after the core's."""
    pytest.importorskip("roleserve_kubernetes")
    pytest.importorskip("roleserve_metrics")
    done = subprocess.run(
        [sys.executable, "-m", "roleserve_core", "ctl", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    listing = done.stdout.split("commands:", 1)[1]
    assert listing.index("credentials") < listing.index("kubeconfig")
    assert "from roleserve-kubernetes: `roleserve ctl kubeconfig --help`" in listing
    assert "from roleserve-metrics: `roleserve ctl prometheus-config --help`" in listing


@pytest.mark.parametrize("group", ["roleserve.ctl", "roleserve.plugins", "console_scripts"])
def test_the_metadata_reader_finds_what_importlib_metadata_finds(group: str) -> None:
    """``cli._installed`` (read without importing ``importlib.metadata``) agrees with it on
    the installed entry points and on roleserve-core's version."""
    import importlib.metadata

    from roleserve_core.cli import _installed

    ours = sorted((e.name, e.value, e.distribution) for e in _installed.entry_points(group))
    theirs = importlib.metadata.entry_points(group=group)
    assert ours == sorted((e.name, e.value, e.dist.name) for e in theirs if e.dist is not None)
    assert _installed.version("roleserve-core") == importlib.metadata.version("roleserve-core")
    assert _installed.version("no-such-distribution-here") is None


def test_the_metadata_reader_reads_an_egg_info_as_importlib_metadata_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin installed the older way (``setup.py develop``: ``NAME.egg-info`` with a
    ``PKG-INFO``) keeps its ``ctl`` command, and a ``.dist-info`` later on the path of the
    same name is shadowed, as ``importlib.metadata`` has it."""
    import importlib.metadata

    from roleserve_core.cli import _installed

    egg = tmp_path / "first" / "roleserve_legacy_plugin.egg-info"
    egg.mkdir(parents=True)
    (egg / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: roleserve-legacy-plugin\nVersion: 0.3.0\n\nThe description.\n"
    )
    (egg / "entry_points.txt").write_text("[roleserve.ctl]\nlegacy = legacy.ctl:add_parsers\n")
    shadowed = tmp_path / "second" / "roleserve_legacy_plugin-9.0.dist-info"
    shadowed.mkdir(parents=True)
    (shadowed / "METADATA").write_text("Name: roleserve-legacy-plugin\nVersion: 9.0\n")
    (shadowed / "entry_points.txt").write_text("[roleserve.ctl]\nshadowed = x:y\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "first"), str(tmp_path / "second")])

    ours = [(e.name, e.value, e.distribution) for e in _installed.entry_points("roleserve.ctl")]
    theirs = importlib.metadata.entry_points(group="roleserve.ctl")
    assert ours == [(e.name, e.value, e.dist.name) for e in theirs if e.dist is not None]
    assert ours == [("legacy", "legacy.ctl:add_parsers", "roleserve-legacy-plugin")]
    assert _installed.version("roleserve_legacy_plugin") == "0.3.0"
    assert importlib.metadata.version("roleserve_legacy_plugin") == "0.3.0"


STANDARD_HEAVY = ("importlib.metadata", "typing", "dataclasses", "inspect", "lazy_loader")
"""Standard modules each costing the answer a tenth of the interpreter's start or more
(importlib.metadata: twice it), which ``--version`` and the listings do without."""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["ctl", "--help"]], ids=" ".join)
def test_version_and_listings_load_no_costly_standard_module(argv: list[str]) -> None:
    assert _loaded(STANDARD_HEAVY, *argv) == []


SERVER_SIDE = (
    "roleserve_core.rpc._server",
    "roleserve_core.rpc._peer",
    "roleserve_core.rpc._stats",
    "roleserve_core.supervisor",
    "roleserve_core.process",
)
"""What a node serves with, and what a client of the cluster does without: rpc's server
side (interceptors, peers, statistics), the supervision tree, the process runner."""

RUN_PROBE = """
import json, sys
from roleserve_core.cli import main
code = main(sys.argv[1:])
loaded = [name for name in {modules!r} if name in sys.modules]
print(json.dumps({{"code": code, "loaded": loaded}}), file=sys.stderr)
"""


@pytest.mark.parametrize("leader", ["searched", "remembered"])
def test_ctl_nodes_loads_no_server_side(
    leader: str, ctl_cluster: object, ctl_access_dir: Path
) -> None:
    """``ctl nodes`` (the leader searched for, then the one remembered) lists the nodes
    with the client side of rpc alone: no server side, no supervisor (``find_leader``
    loads it only for the pauses of a pass that found no leader)."""
    argv = ["ctl", "--credentials", str(ctl_access_dir), "nodes"]
    runs = 2 if leader == "remembered" else 1
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", RUN_PROBE.format(modules=(*SERVER_SIDE, "grpc")), *argv],
            capture_output=True,
            text=True,
            check=True,
        )
    ran = json.loads(done.stderr.strip().splitlines()[-1])
    assert ran == {"code": 0, "loaded": ["grpc"]}, done.stderr
    assert (ctl_access_dir / LEADER_FILE).exists()


def test_ctl_checks_the_credentials_once(ctl_cluster: object, ctl_access_dir: Path) -> None:
    """The credentials are checked (cryptography) by the first ``ctl`` run on them, and
    again once they change; a run on credentials checked before connects with their PEM
    alone (``access.checked_credentials``)."""
    argv = ["ctl", "--credentials", str(ctl_access_dir), "nodes"]

    def cryptography_loaded() -> bool:
        done = subprocess.run(
            [sys.executable, "-c", RUN_PROBE.format(modules=("cryptography",)), *argv],
            capture_output=True,
            text=True,
            check=True,
        )
        ran = json.loads(done.stderr.strip().splitlines()[-1])
        assert ran["code"] == 0, done.stderr
        return bool(ran["loaded"])

    (ctl_access_dir / CHECKED_FILE).unlink(missing_ok=True)
    assert cryptography_loaded()
    assert not cryptography_loaded()
    ca = (ctl_access_dir / CA_FILE).read_bytes()
    (ctl_access_dir / CA_FILE).write_bytes(ca + b"\n")  # the same CA, other content
    assert cryptography_loaded()
    assert not cryptography_loaded()
