"""A node loads the code of the roles it holds, no more: read from ``sys.modules``.

A node of every in-repo plugin runs in process (the test kit's harness, on a fake clock),
in a fresh interpreter of its own: this one has imported everything long ago. It reports,
as JSON, which of the heavy modules it has loaded after each step: no role; the
``kubernetes_worker`` role; then a bootstrap, which wants a control plane. No real
program is needed: each binary is configured to a path that does not exist, so each
worker gets as far as importing its code and then fails for good (or notes the absence).

Why in process rather than a real node: the question is what the node process imports,
and ``sys.modules`` of a harness node is exactly that of a node process with the same
plugins and values, without a test-only door into a real node's interpreter
(NodeManagement answers the cluster's owner; a list of modules is nothing it should
serve). ``benchmarks/node_weight.py`` measures what it means for real node processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import ipaddress, json, sys
from pathlib import Path

import anyio

from roleserve_core import (
    BOOTSTRAP, NETWORK, BootstrapRequest, KubernetesWorker, NetworkStatus, NodeRoles, State,
)
from roleserve_core.identity import generate_key
from roleserve_core.testing import FakeClock, NodeHarness, PluginHarness, SupervisorRunner

WATCHED = json.loads(sys.argv[2])
PLUGINS = {
    "controlplane": "roleserve_controlplane.hooks",
    "kubernetes": "roleserve_kubernetes.hooks",
    "metrics": "roleserve_metrics.hooks",
    "clusternet": "roleserve_clusternet.hooks",
    "hostsfile": "roleserve_hostsfile.hooks",
}


def loaded():
    return sorted(name for name in WATCHED if name in sys.modules)


async def main(data_dir):
    missing = str(data_dir / "missing")
    config = {
        "controlplane": {"etcd": missing},
        "kubernetes": {"containerd": missing, "kubelet": missing},
        "clusternet": {"off": "a test node"},
        "hostsfile": {"path": str(data_dir / "hosts")},
    }
    harness = PluginHarness()
    for name, module in PLUGINS.items():
        harness.register(__import__(module, fromlist=["_"]), name)
    steps = {"hooks loaded": loaded()}
    async with SupervisorRunner(FakeClock()) as runner:
        node = await NodeHarness.start(runner, harness.runtime(data_dir, config=config))
        node.set_roles(NodeRoles())
        await node.wait_state("root.role.controlplane", State.HEALTHY)
        await anyio.wait_all_tasks_blocked()
        steps["no role"] = loaded()
        node.set_roles(NodeRoles(kubernetes_worker=KubernetesWorker()))
        await node.wait_status("root.role.kubernetes_worker", lambda s: s.state is not State.NEW)
        # Running, its code loaded: it waits for inputs (a note) or failed for good.
        await node.wait_status(
            "root.role.kubernetes_kubelet", lambda s: s.state is not State.NEW or bool(s.note)
        )
        steps["kubernetes_worker"] = loaded()
        node.set(NETWORK, NetworkStatus(ipaddress.ip_address("127.0.0.1")))
        node.set(BOOTSTRAP, BootstrapRequest(generate_key()))
        dead = await node.wait_status("root.role.controlplane", lambda s: s.final)
        steps["bootstrap"] = loaded()
        steps["controlplane note"] = dead.note
    print(json.dumps(steps))


anyio.run(main, Path(sys.argv[1]))
"""

CONSENSUS = (
    "etcd3aio",
    "roleserve_controlplane.consensus.client",
    "roleserve_controlplane.consensus.member",
    "roleserve_controlplane.curator.curator",
    "roleserve_controlplane.controlplane_start",
)
"""What a control plane needs: etcd's client, the member, the curator."""

KUBERNETES_WORKER = (
    "roleserve_kubernetes.worker_kubernetes_worker",
    "roleserve_kubernetes.worker_kubelet",
    "roleserve_kubernetes.containerd",
    "roleserve_kubernetes.kubelet",
)
"""What a Kubernetes worker node needs: containerd's and the kubelet's workers."""

WORKER_MODULES = (
    "roleserve_controlplane.worker_controlplane",
    "roleserve_kubernetes.worker_controller",
    "roleserve_metrics.worker_metrics",
    "roleserve_hostsfile.worker_hostsfile",
)
"""The workers that run on every node: loaded when the node starts them, not before."""


NOT_FOR_THESE_ROLES = ("aiohttp",)
"""Loaded by none of these steps: aiohttp is the Kubernetes controller's (its API client);
the metrics worker, on every node, serves and proxies with the standard library's
``http.server`` and ``http.client``, which ``prometheus_client`` loads anyway."""


def in_a_fresh_interpreter(script: str, *arguments: str) -> str:
    """What ``script`` printed, run with ``arguments``; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-c", script, *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def steps(tmp_path: Path) -> dict[str, object]:
    watched = json.dumps([*CONSENSUS, *KUBERNETES_WORKER, *WORKER_MODULES, *NOT_FOR_THESE_ROLES])
    printed = in_a_fresh_interpreter(SCRIPT, str(tmp_path), watched)
    result: dict[str, object] = json.loads(printed.splitlines()[-1])
    return result


def test_a_node_loads_the_modules_of_a_role_when_it_is_given_not_before(tmp_path: Path) -> None:
    seen = steps(tmp_path)
    assert seen["hooks loaded"] == []
    assert seen["no role"] == sorted(WORKER_MODULES)
    assert seen["kubernetes_worker"] == sorted([*WORKER_MODULES, *KUBERNETES_WORKER])
    assert seen["bootstrap"] == sorted([*WORKER_MODULES, *KUBERNETES_WORKER, *CONSENSUS])
    assert "etcd" in str(seen["controlplane note"])  # it got as far as looking for etcd


NO_AIOHTTP = r"""
import importlib, pkgutil, sys

for package in sys.argv[1:]:
    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if ".testing" not in module.name and not module.name.endswith(".__main__"):
            importlib.import_module(module.name)
            if "aiohttp" in sys.modules:
                sys.exit(f"aiohttp comes with {module.name}")
"""

PACKAGES = (
    "roleserve_core",
    "roleserve_controlplane",
    "roleserve_kubernetes",
    "roleserve_metrics",
    "roleserve_clusternet",
    "roleserve_hostsfile",
)


def test_no_module_a_node_may_run_imports_aiohttp() -> None:
    """The metrics server and proxy, and the Kubernetes controller's API calls, use the
    standard library's ``http.server`` and ``http.client`` (already loaded by
    ``prometheus_client``): aiohttp cost every node ~10 MiB. Every module of the core and
    of the in-repo plugins, their test kits aside, imported in a fresh interpreter; the
    first that brings aiohttp in is named."""
    in_a_fresh_interpreter(NO_AIOHTTP, *PACKAGES)  # exits 1 naming the module, if one does
