"""The ``roleserve`` command: ``roleserve plugins`` [--json] [--strict], ``node config``.

Most tests call ``main()`` with the test plugins of ``tests/plugins/`` as the installed
entry points; one runs the installed command in a subprocess and checks the listing of the
workspace's real plugins, with and without the allow list.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import roleserve_core
from roleserve_core import builtin as core_plugin
from roleserve_core.cli import main
from roleserve_core.cli._invocation import COMMAND_ENV, roleserve_command
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.plugin_loader import BUILTIN_PLUGINS, ENTRY_POINT_GROUP
from roleserve_core.rpc._offload import ENCRYPTION_OFFLOAD_EXPERIMENT, GRPC_EXPERIMENTS_ENV
from roleserve_core.version import core_version

PLUGINS_DIR = Path(__file__).parent / "plugins"
ENVIRONMENT = ("ROLESERVE_PLUGINS", "ROLESERVE_DISABLE_PLUGINS", "ROLESERVE_TRACE_HOOKS")
JSON_KEYS = {"name", "distribution", "version", "state", "error", "hooks", "workers", "values"}

Install = Callable[..., None]

CORE_VALUES = [key.name for key in core_plugin.roleserve_values()]
BUILTINS = [builtin.name for builtin in BUILTIN_PLUGINS]
"""core, then one plugin per worker of the core, named as its worker."""
CORE_WORKERS = BUILTINS[1:]


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Install:
    """``install("good", ...)``: these test plugins are the installed entry points."""
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    for variable in ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)
    real = importlib.metadata.entry_points

    def install_plugins(*modules: str) -> None:
        found = [importlib.metadata.EntryPoint(m, m, ENTRY_POINT_GROUP) for m in modules]

        def entry_points(**selection: Any) -> Any:
            return found if selection.get("group") == ENTRY_POINT_GROUP else real(**selection)

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)

    return install_plugins


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``roleserve ARGV``: exit code, stdout, stderr."""
    try:
        code = main(list(argv))
    except SystemExit as exit:  # argparse exits for --help
        code = exit.code if isinstance(exit.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def listing(capsys: pytest.CaptureFixture[str], *options: str) -> dict[str, dict[str, Any]]:
    """``roleserve plugins --json``, by plugin name, in the order printed."""
    code, out, _ = run(capsys, "plugins", "--json", *options)
    assert code == 0
    entries = json.loads(out)
    assert isinstance(entries, list)
    assert all(set(entry) >= JSON_KEYS for entry in entries)
    return {entry["name"]: entry for entry in entries}


def test_plugins_json(install: Install, capsys: pytest.CaptureFixture[str]) -> None:
    install("good", "broken_import")
    plugins = listing(capsys)
    assert list(plugins) == [*BUILTINS, "broken_import", "good"]
    core, broken, good = plugins["core"], plugins["broken_import"], plugins["good"]
    assert {key: core[key] for key in JSON_KEYS} == {
        "name": "core",
        "distribution": "roleserve-core",
        "version": core_version(),
        "state": "loaded",
        "error": None,
        "hooks": ["roleserve_values"],
        "workers": [],
        "values": CORE_VALUES,
    }
    assert [(plugins[name]["workers"], plugins[name]["hooks"]) for name in CORE_WORKERS] == [
        ([name], ["roleserve_workers"]) for name in CORE_WORKERS
    ]
    assert (good["state"], good["workers"], good["values"], good["reads"]) == (
        "loaded",
        ["good_worker"],
        ["good_roles", "good_connection"],
        ["roles"],
    )
    assert good["worker_docs"] == {"good_worker": "Runs while the node has the role good."}
    assert good["hooks"] == [
        "on_curator_connection",
        "on_roles",
        "roleserve_values",
        "roleserve_workers",
    ]
    assert (broken["state"], broken["hooks"]) == ("failed", [])
    assert broken["error"] == (
        "import failed: ModuleNotFoundError: No module named 'roleserve_test_missing_dependency'"
    )


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("ROLESERVE_PLUGINS", "good", "not named in ROLESERVE_PLUGINS"),
        ("ROLESERVE_DISABLE_PLUGINS", "broken_import", "named in ROLESERVE_DISABLE_PLUGINS"),
    ],
)
def test_plugins_json_honours_the_selection(
    install: Install,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    reason: str,
) -> None:
    install("good", "broken_import")
    monkeypatch.setenv(variable, value)
    plugins = listing(capsys)
    assert {name: (entry["state"], entry["reason"]) for name, entry in plugins.items()} == {
        **dict.fromkeys(BUILTINS, ("loaded", None)),
        "broken_import": ("blocked", reason),
        "good": ("loaded", None),
    }


def test_plugins_json_keeps_warnings_off_stdout(
    install: Install, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install("good")
    monkeypatch.setenv("ROLESERVE_PLUGINS", "good,gone")
    code, out, err = run(capsys, "plugins", "--json")
    assert code == 0
    assert [entry["name"] for entry in json.loads(out)] == [*BUILTINS, "good"]
    assert err == "warning: ROLESERVE_PLUGINS names 'gone', which is not installed\n"


def table(text: str) -> list[list[str]]:
    """The cells of a table whose columns start where its header's words do."""
    header, *rows = text.splitlines()
    starts = [
        index
        for index, char in enumerate(header)
        if char != " " and header[index - 1 : index] in ("", " ")
    ]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [[line[start:end].strip() for start, end in bounds] for line in [header, *rows]]


def test_plugins_table(install: Install, capsys: pytest.CaptureFixture[str]) -> None:
    install("good", "broken_import", "typo_hook")
    code, out, _ = run(capsys, "plugins")
    assert code == 0
    listed, details = out.split("\n\n", 1)
    assert table(listed) == [
        ["NAME", "DISTRIBUTION", "VERSION", "STATE", "WORKERS", "VALUES", "HOOKS"],
        [
            *("core", "roleserve-core", core_version(), "loaded", "-"),
            *(", ".join(CORE_VALUES), "roleserve_values"),
        ],
        *(
            [name, "roleserve-core", core_version(), "loaded", name, "-", "roleserve_workers"]
            for name in CORE_WORKERS
        ),
        ["broken_import", "-", "-", "failed", "-", "-", "-"],
        [
            "good",
            "-",
            "-",
            "loaded",
            "good_worker",
            "good_roles, good_connection",
            "on_curator_connection, on_roles, roleserve_values, roleserve_workers",
        ],
        ["typo_hook", "-", "-", "loaded", "-", "-", "on_role, roleserve_metrics_exporters"],
    ]
    assert details.splitlines()[len(BUILTINS) :] == [
        "broken_import: (no description)",
        "  error: import failed: ModuleNotFoundError: "
        "No module named 'roleserve_test_missing_dependency'",
        "good: A well-behaved test plugin: one value of its own per hook, and a gated worker.",
        "  worker good_worker: Runs while the node has the role good.",
        "typo_hook: A test plugin with a misspelled hook, and an optional hook of a plugin "
        "that is absent.",
        "  file: tests/plugins/typo_hook.py",
        "  warning: implements 'on_role', which no loaded plugin defines; did you mean "
        "'on_roles'? (mark it @hookimpl(optionalhook=True) if it belongs to an optional plugin)",
    ]
    assert details.splitlines()[:2] == [
        "core: The built-in plugin core: the node's values; each of its workers is a plugin of "
        "its own.",
        "rolefetch: Watches this node at the curator; sets and saves its roles.",
    ]


def test_the_plugins_listing_fits_an_80_column_terminal(
    install: Install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lists (workers, values, hooks) go under their row, and every other line wraps;
    piped, without $COLUMNS, it is as test_plugins_table shows."""
    install("good", "broken_import", "typo_hook", "configurable")
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "plugins")
    assert code == 0
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80, out
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "STATE"]
    good = lines.index("good           -               -        loaded")
    assert lines[good + 1 : good + 4] == [
        "  workers: good_worker",
        "  values: good_roles, good_connection",
        "  hooks: on_curator_connection, on_roles, roleserve_values, roleserve_workers",
    ]
    [warning] = [i for i, line in enumerate(lines) if line.startswith("  warning: implements")]
    assert lines[warning + 1].startswith("    ")  # its continuation, indented under it


def test_the_installed_plugins_fit_an_80_column_terminal() -> None:
    """The workspace's plugins: ~255 columns as one line a plugin."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROLESERVE_")}
    done = subprocess.run(
        [sys.executable, "-m", "roleserve_core", "plugins"],
        env={**environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 80, done.stdout
    assert "  workers: kubernetes_controller, kubernetes_worker, kubernetes_kubelet" in lines
    assert any(line.startswith("      description: ") for line in lines)  # a settings table's


def test_blocking_core_exits_2(
    install: Install, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install("good")
    monkeypatch.setenv("ROLESERVE_DISABLE_PLUGINS", "core")
    assert run(capsys, "plugins") == (
        2,
        "",
        "roleserve plugins: plugin 'core' is essential and cannot be disabled: it owns the "
        "node's values; remove it from ROLESERVE_DISABLE_PLUGINS\n",
    )


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ("broken_import", "plugin 'broken_import' failed: import failed: ModuleNotFoundError"),
        (
            "wrong_api",
            "plugin 'wrong_api' (tests/plugins/wrong_api.py) failed: was written for plugin API 2",
        ),
        (
            "raising_values",
            "plugin 'raising_values' (tests/plugins/raising_values.py) failed: "
            "roleserve_values raised",
        ),
        (
            "typo_hook",
            "plugin 'typo_hook' (tests/plugins/typo_hook.py): implements 'on_role', which no "
            "loaded plugin defines; did you mean 'on_roles'?",
        ),
        (
            "no_api",
            "plugin 'no_api' (tests/plugins/no_api.py) failed: does not declare the plugin "
            "API it was written for; add the line `ROLESERVE_PLUGIN_API = 1` to "
            "tests/plugins/no_api.py\n",
        ),
        (
            "bad_signature",
            "plugin 'bad_signature' (tests/plugins/bad_signature.py) failed: "
            "roleserve_workers(node, cluster) asks for 'cluster', which the hook does not "
            "pass; define it as roleserve_workers(node), leaving out the arguments it does "
            "not use\n",
        ),
        (
            "dash_worker",
            "plugin 'dash_worker' (tests/plugins/dash_worker.py) failed: roleserve_workers "
            "raised InvalidRunnableNameError: invalid worker name 'dash-worker'; names must "
            "match ^[a-z0-9_]{1,64}$ (the last part of its DN): call it 'dash_worker'\n",
        ),
        (
            "owned_key",
            "plugin 'owned_key' (tests/plugins/owned_key.py) failed: roleserve_values raised "
            "DuplicateValueKeyError: value 'roles' is already owned by plugin 'core', which "
            "loaded first; a value has exactly one owner: name this plugin's key "
            "'owned_key_roles', or read the one 'core' owns\n",
        ),
    ],
)
def test_strict_exits_1_when_a_plugin_fails(
    install: Install, capsys: pytest.CaptureFixture[str], broken: str, message: str
) -> None:
    install("good", broken)
    code, out, err = run(capsys, "plugins", "--strict")
    assert (code, out) == (1, "")
    assert err.startswith(f"roleserve plugins: {message}")
    install("good")
    assert run(capsys, "plugins", "--strict", "--json")[0] == 0


@pytest.mark.parametrize("module", ["api_zero", "wrong_api"])
def test_a_plugin_of_an_api_the_core_does_not_accept_is_listed_failed_in_one_line(
    install: Install, capsys: pytest.CaptureFixture[str], module: str
) -> None:
    """Plugin API 0 (older) and 2 (newer) are refused at load, not loaded to fail later:
    the line names the plugin, the API it declares and the API(s) the core accepts."""
    install("good", module)
    declared, age = {"api_zero": (0, "older"), "wrong_api": (2, "newer")}[module]
    code, out, _ = run(capsys, "plugins")
    assert code == 0
    listed, details = out.split("\n\n", 1)
    assert [module, "-", "-", "failed", "-", "-", "-"] in table(listed)
    error = (
        f"was written for plugin API {declared}; this roleserve-core accepts plugin API 1. "
        "Install a version of the plugin made for it."
    )
    lines = details.splitlines()
    at = lines.index(next(line for line in lines if line.startswith(f"{module}: ")))
    assert lines[at : at + 3] == [
        f"{module}: A test plugin written for plugin API {declared}, {age} than any this core "
        "accepts.",
        f"  file: tests/plugins/{module}.py",
        f"  error: {error}",
    ]


def test_plugins_lists_every_setting_with_type_default_and_doc(
    install: Install, capsys: pytest.CaptureFixture[str]
) -> None:
    install("configurable", "good")
    code, out, _ = run(capsys, "plugins")
    assert code == 0
    details = out.split("\n\n", 1)[1].splitlines()
    start = details.index("  settings ([plugins.configurable] in roleserve.toml):")
    assert table("\n".join(line[4:] for line in details[start + 1 : start + 8])) == [
        ["SETTING", "TYPE", "DEFAULT", "DESCRIPTION"],
        ["greeting", "str", '"hello"', "What the worker says."],
        ["times", "int", "1", "How often it says it."],
        ["pause", "float", "0.5", "Seconds between greetings."],
        ["loud", "bool", "false", "Whether it shouts."],
        ["names", "list[str]", "[]", "Whom it greets."],
        ["log_file", "str | None", "(not set)", "Where it logs; unset: nowhere."],
    ]
    assert details[start + 8].startswith("good: ")  # good declares none: no settings table

    plugins = listing(capsys)
    assert plugins["good"]["settings"] == []
    assert plugins["configurable"]["settings"][::5] == [
        {
            "name": "greeting",
            "type": "str",
            "default": "hello",
            "optional": False,
            "allowed": None,
            "doc": "What the worker says.",
        },
        {
            "name": "log_file",
            "type": "str | None",
            "default": None,
            "optional": True,
            "allowed": None,
            "doc": "Where it logs; unset: nowhere.",
        },
    ]


def test_plugins_lists_what_a_setting_allows(
    install: Install, capsys: pytest.CaptureFixture[str]
) -> None:
    install("checked")
    [port, mode, *_] = listing(capsys)["checked"]["settings"]
    assert (port["allowed"], mode["allowed"]) == (
        "an integer from 1 to 65535",
        'one of "fast", "safe"',
    )
    code, out, _ = run(capsys, "plugins")
    assert code == 0
    assert "The port it listens on. Allowed: an integer from 1 to 65535." in out


@pytest.mark.parametrize("allow", [None, "hostsfile"])
def test_the_installed_command_lists_the_workspace_plugins(allow: str | None) -> None:
    """The real entry points: the workspace's five plugins and the example plugin."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROLESERVE_")}
    if allow is not None:
        environ["ROLESERVE_PLUGINS"] = allow
    done = subprocess.run(
        [sys.executable, "-m", "roleserve_core", "plugins", "--json"],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    plugins = {entry["name"]: entry for entry in json.loads(done.stdout)}
    names = ["clusternet", "controlplane", "hello", "hostsfile", "kubernetes", "metrics"]
    assert list(plugins) == [*BUILTINS, *names]
    loaded = {*BUILTINS, "hostsfile"} if allow else {*BUILTINS, *names}
    assert {name: entry["state"] for name, entry in plugins.items()} == {
        name: "loaded" if name in loaded else "blocked" for name in plugins
    }
    assert {name: entry["distribution"] for name, entry in plugins.items()} == {
        **dict.fromkeys(BUILTINS, "roleserve-core"),
        **{name: f"roleserve-{name}" for name in names},
        "hello": "roleserve-example-hello",
    }
    assert (plugins["hostsfile"]["values"], plugins["hostsfile"]["workers"]) == ([], ["hostsfile"])
    assert plugins["hostsfile"]["version"] == importlib.metadata.version("roleserve-hostsfile")
    if allow is None:
        assert (plugins["hello"]["workers"], plugins["hello"]["values"]) == (
            ["hello", "hello_neighbours"],
            ["hello_greeting", "hello_neighbours"],
        )
        settings = [setting["name"] for setting in plugins["controlplane"]["settings"]]
        assert settings == [
            "etcd",
            "lease_ttl",
            "heartbeat_ms",
            "election_ms",
            "cluster_network",
            "node_prefix_length",
            "node_certificate_lifetime",
            "history_retention",
            "quota_backend_bytes",
            "defrag_free_bytes",
            "defrag_free_ratio",
            "etcd_gc_percent",
        ]
    else:
        assert plugins["hello"]["reason"] == "not named in ROLESERVE_PLUGINS"


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert out.startswith("usage: roleserve")
    assert "roleserve: a node agent." in out
    assert "plugins" in out
    assert "list installed plugins and what each contributes" in out


def test_plugins_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plugins", "--help")
    assert code == 0
    assert out.startswith("usage: roleserve plugins [-h] [--json] [--strict]")
    assert "ROLESERVE_PLUGINS (allow list) and ROLESERVE_DISABLE_PLUGINS (block list)" in " ".join(
        out.split()
    )


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert (code, out) == (2, "")
    assert err.startswith("usage: roleserve")
    assert "commands:" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--version") == (0, f"roleserve {core_version()}\n", "")


def test_hints_name_the_command_as_it_was_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(COMMAND_ENV, raising=False)
    assert roleserve_command() == "roleserve"  # main() in a test
    assert roleserve_command("roleserve") == "roleserve"
    main_module = str(Path(roleserve_core.__file__).parent / "__main__.py")
    assert roleserve_command(main_module) == f"{sys.executable} -m roleserve_core"
    elsewhere = tmp_path / "my env" / "bin" / "roleserve"  # not the one on PATH
    monkeypatch.setenv("PATH", str(tmp_path))
    assert roleserve_command(str(elsewhere)) == f"'{elsewhere}'"
    installed = tmp_path / "roleserve"
    installed.write_text("#!/bin/sh\n")
    installed.chmod(0o755)
    assert roleserve_command(str(installed)) == "roleserve"  # the one PATH finds
    monkeypatch.setenv(COMMAND_ENV, "./dev roleserve")
    assert roleserve_command(str(elsewhere)) == "./dev roleserve"


# -- roleserve node config ----------------------------------------------------------------


def node_config(
    capsys: pytest.CaptureFixture[str], data: Path, text: str, *options: str
) -> tuple[int, str, str]:
    """``roleserve node config`` on ``data`` whose roleserve.toml is ``text``."""
    data.mkdir(exist_ok=True)
    (data / "roleserve.toml").write_text(text)
    return run(capsys, "node", "config", "--data-dir", str(data), *options)


def test_node_config_prints_toml_a_node_reads_the_same_way(
    install: Install, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    install("configurable", "good")
    text = '[node]\nlog_level = "debug"\n[plugins.configurable]\ntimes = 3\nnames = ["a"]\n'
    code, out, err = node_config(capsys, tmp_path, text)
    assert (code, err) == (0, "")
    assert tomllib.loads(out) == {
        "node": {
            "log_level": "debug",
            "log_max_bytes": 10 << 20,
            "log_files": 5,
            "strict_plugins": False,
        },
        "plugins": {
            "configurable": {
                "greeting": "hello",
                "times": 3,
                "pause": 0.5,
                "loud": False,
                "names": ["a"],
            }
        },
    }
    assert "# Where it logs; unset: nowhere.\n# log_file: not set\n" in out
    assert "# address: not set\n" in out
    assert sorted(path.name for path in tmp_path.iterdir()) == ["roleserve.toml"]


def test_node_config_json(
    install: Install, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    install("configurable", "good")
    code, out, _ = node_config(capsys, tmp_path, "[plugins.configurable]\npause = 2\n", "--json")
    assert code == 0
    assert json.loads(out) == {
        "node": {
            "address": None,
            "log_level": "info",
            "log_file": None,
            "log_max_bytes": 10 << 20,
            "log_files": 5,
            "strict_plugins": False,
        },
        "plugins": {
            "core": {},
            "configurable": {
                "greeting": "hello",
                "times": 1,
                "pause": 2.0,
                "loud": False,
                "names": [],
                "log_file": None,
            },
            "good": {},
        },
    }


def test_node_commands_turn_grpcs_encryption_offload_on_and_others_leave_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's process starts gRPC with the experiment its curator's server needs
    (``rpc._offload``); a command that runs no curator leaves gRPC's experiments alone."""
    monkeypatch.setenv(GRPC_EXPERIMENTS_ENV, "")
    assert run(capsys, "plugins")[0] == 0
    assert os.environ[GRPC_EXPERIMENTS_ENV] == ""
    assert node_config(capsys, tmp_path, "")[0] == 0
    assert os.environ[GRPC_EXPERIMENTS_ENV] == ENCRYPTION_OFFLOAD_EXPERIMENT


def test_node_config_refuses_what_the_node_refuses(
    install: Install, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    install("configurable")
    code, out, err = node_config(capsys, tmp_path, "[plugins.configurable]\nloud = 'yes'\n")
    assert (code, out) == (2, "")
    assert err == (
        f"roleserve node: error: {tmp_path / 'roleserve.toml'}: [plugins.configurable] loud "
        'must be true or false, not "yes" (Whether it shouts); correct it, or remove it '
        "for the default, false\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["roleserve.toml"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[plugins.checked]\nport = 0\n",
            "[plugins.checked] port must be an integer from 1 to 65535, not 0 (The port it "
            "listens on); correct it, or remove it for the default, 7000",
        ),
        # The plugin's own check across settings, in roleserve_workers: it used to fail
        # only the plugin, and the command printed it and exited 0.
        ("[plugins.checked]\nlow = 3\n", "[plugins.checked] low (3) must not be above high (2)"),
    ],
)
def test_node_config_refuses_a_value_a_setting_does_not_allow(
    install: Install, capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    install("checked")
    code, out, err = node_config(capsys, tmp_path, text)
    assert (code, out) == (2, "")
    assert err == f"roleserve node: error: {tmp_path / 'roleserve.toml'}: {message}\n"


def test_node_config_refuses_an_address_other_than_the_saved_one(
    install: Install, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    install("good")
    (tmp_path / "node").mkdir()
    NodeDataDirectory(tmp_path).save_address(ipaddress.IPv4Address("127.0.0.5"))
    code, out, err = node_config(capsys, tmp_path, '[node]\naddress = "127.0.0.6"\n')
    assert (code, out) == (2, "")
    assert err == (
        f"roleserve node: error: {tmp_path} is the node at 127.0.0.5, saved at its first "
        f"start, and [node] address in {tmp_path / 'roleserve.toml'} gives 127.0.0.6; start "
        "it with 127.0.0.5 or without [node] address in "
        f"{tmp_path / 'roleserve.toml'} (changing a node's address is not supported yet)\n"
    )


def test_node_config_refuses_a_zero_interval_of_an_installed_plugin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The issue's case: clusternet's own check refused it in roleserve_workers, so the
    command printed the error and exited 0, and a node ran without clusternet."""
    code, out, err = node_config(capsys, tmp_path, "[plugins.clusternet]\nreconcile_interval = 0\n")
    assert (code, out) == (2, "")
    assert err.startswith(
        f"roleserve node: error: {tmp_path / 'roleserve.toml'}: [plugins.clusternet] "
        "reconcile_interval must be a number above 0, not 0 "
    )
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("lease_ttl = 0", "lease_ttl must be an integer of at least 1, not 0"),
        ("heartbeat_ms = -5", "heartbeat_ms must be an integer of at least 1, not -5"),
        ("election_ms = 0", "election_ms must be an integer from 5 to 50000, not 0"),
        ("node_prefix_length = 0", "node_prefix_length must be an integer from 1 to 128, not 0"),
        (
            'cluster_network = "8.8.0.0/16"',
            "cluster_network must be a private network in canonical CIDR form",
        ),
    ],
)
def test_node_config_refuses_a_controlplane_setting_its_worker_cannot_use(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str, named: str
) -> None:
    """Accepted before, each left the controlplane worker DEAD (or etcd refusing to start)
    while the command exited 0."""
    code, out, err = node_config(capsys, tmp_path, f"[plugins.controlplane]\n{line}\n")
    assert (code, out) == (2, "")
    assert err.startswith(
        f"roleserve node: error: {tmp_path / 'roleserve.toml'}: [plugins.controlplane] {named}"
    )
    assert err.count("\n") == 1


def test_node_config_warns_about_a_section_it_does_not_check(
    install: Install,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    install("configurable", "good")
    monkeypatch.setenv("ROLESERVE_DISABLE_PLUGINS", "configurable")
    code, out, err = node_config(capsys, tmp_path, "[plugins.configurable]\nloud = 'yes'\n")
    assert code == 0
    assert "[plugins.configurable]" not in out
    assert err == (
        f"WARNING: {tmp_path / 'roleserve.toml'}: [plugins.configurable] is ignored: plugin "
        "'configurable' is named in ROLESERVE_DISABLE_PLUGINS\n"
    )


@pytest.mark.parametrize("argv", [["plugins"], ["--version"], ["--help"], ["ctl", "--help"]])
def test_a_reader_that_went_away_ends_the_command_quietly(argv: list[str]) -> None:
    """``roleserve plugins | head``: the reader closes the pipe before all is written. The
    command ends without Python's traceback of the closed pipe (at the write, or at its
    flush at exit), and exits 0, as it would have had the reader stayed (``READER_GONE``).
    The pipe's reading end is closed before the command starts, so its first write fails,
    whatever the timing."""
    reading, writing = os.pipe()
    os.close(reading)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "roleserve_core", *argv],
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(writing)
    assert (done.returncode, done.stderr) == (0, "")
