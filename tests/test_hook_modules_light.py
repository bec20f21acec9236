"""Every in-repo plugin's hook module is light: imported alone, in a fresh interpreter, it
pulls in none of its plugin's worker modules nor their heavy dependencies.

The hook module (the ``roleserve.plugins`` entry point) is imported on every node that has
the plugin installed, whatever its roles, and by ``roleserve plugins``; what it imports,
every node carries (docs/plugin-guide.md, "Heavy workers"). Workers name their code with
``lazy_runnable`` instead, so it loads with their role. A fresh interpreter, because this
one has long imported everything. The same holds for ``roleserve plugins`` and ``roleserve
node config``, which assemble a node of every installed plugin (its workers listed with
their docs) without running it.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from roleserve_core import LazyRunnable
from roleserve_core.testing import PluginHarness

REPOSITORY = Path(__file__).resolve().parents[1]
PLUGIN_DIRECTORIES = sorted(
    path.parent for path in REPOSITORY.glob("*/*/pyproject.toml") if path.parts[-3] != "tests"
)
"""plugins/* and examples/*: every distribution of the repository but the core."""

HEAVY = (
    "aiohttp",
    "etcd3aio",
    "prometheus_client",
    "roleserve_controlplane.consensus.client",
    "roleserve_controlplane.consensus.member",
    "roleserve_controlplane.curator.curator",
)
"""Dependencies only some workers need (an etcd client, an HTTP server), and the
controlplane's etcd member, client and curator, which other plugins reach through its top
level (its settings and certificates are light)."""

HEAVY_OF: dict[str, tuple[str, ...]] = {
    "roleserve_clusternet": ("mesh", "reconcile", "push", "pull", "uapi"),
    "roleserve_kubernetes": ("apiserver", "containerd", "kubelet", "cri", "proto", "pki"),
    "roleserve_metrics": ("server", "collectors", "nodeexporter", "exporters"),
    "roleserve_hostsfile": ("files",),
}
"""Each plugin's own modules that only its workers use (besides its ``worker_*``)."""


def hook_modules() -> dict[str, str]:
    """Each in-repo plugin's entry point module, by its plugin name."""
    found = {}
    for directory in PLUGIN_DIRECTORIES:
        project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
        for name, target in project["entry-points"]["roleserve.plugins"].items():
            found[name] = target.partition(":")[0]
    return found


def imported_by(module: str) -> list[str]:
    """The modules ``import module`` loads in a fresh interpreter."""
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def too_heavy(hook_module: str, loaded: list[str]) -> list[str]:
    """The modules of ``loaded`` that a hook module must not import."""
    package = hook_module.partition(".")[0]
    own = tuple(f"{package}.{name}" for name in HEAVY_OF.get(package, ()))
    return [
        name
        for name in loaded
        if name.startswith(f"{package}.worker_")
        or any(name == heavy or name.startswith(f"{heavy}.") for heavy in (*HEAVY, *own))
    ]


def test_every_plugin_of_the_repository_is_checked() -> None:
    assert {"controlplane", "kubernetes", "metrics", "clusternet", "hostsfile", "hello"} <= set(
        hook_modules()
    )


@pytest.mark.parametrize(("plugin", "module"), sorted(hook_modules().items()))
def test_a_hook_module_imports_no_worker_module_nor_heavy_dependency(
    plugin: str, module: str
) -> None:
    assert too_heavy(module, imported_by(module)) == []


COMMANDS = {
    "plugins": ["plugins"],
    "node config": ["node", "config", "--data-dir", "{data_dir}"],
}
"""Commands that assemble a node of every installed plugin (its workers listed, their
docs shown, its settings checked) without running it."""

RUN_COMMAND = """
import atexit, json, sys
from roleserve_core.cli import main
atexit.register(lambda: print("MODULES", json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_commands_that_assemble_a_node_import_no_worker_module(
    command: str, tmp_path: Path
) -> None:
    arguments = [part.format(data_dir=tmp_path) for part in COMMANDS[command]]
    done = subprocess.run(
        [sys.executable, "-c", RUN_COMMAND, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("MODULES ")]
    loaded: list[str] = json.loads(line.removeprefix("MODULES "))
    assert [
        name for name in loaded for module in hook_modules().values() if too_heavy(module, [name])
    ] == []


def test_every_lazy_worker_names_a_function_that_exists(tmp_path: Path) -> None:
    """``lazy_runnable``'s target is a string no type checker reads: import each one."""
    harness = PluginHarness()
    for name, module in sorted(hook_modules().items()):
        harness.register(importlib.import_module(module), name)
    config = {"clusternet": {"off": ""}}  # its worker as a node with the mesh on has it
    runtime = harness.runtime(tmp_path, config=config)
    lazy = {
        name: worker.run
        for name, (_plugin, worker) in runtime.workers.items()
        if isinstance(worker.run, LazyRunnable)
    }
    assert set(lazy) == {
        "clusternet",
        "controlplane",
        "hostsfile",
        "kubernetes_controller",
        "kubernetes_kubelet",
        "kubernetes_worker",
        "metrics",
    }
    for run in lazy.values():
        assert callable(run.resolve())


def test_the_check_sees_a_heavy_import() -> None:
    """What the test above would say of a hook module importing its worker."""
    loaded = ["aiohttp", "aiohttp.web", "roleserve_x.hooks", "roleserve_x.worker_y", "yarl"]
    heavy = ["aiohttp", "aiohttp.web", "roleserve_x.worker_y"]
    assert too_heavy("roleserve_x.hooks", loaded) == heavy
