"""The kubernetes plugin loads through its entry point and owns what it says it owns."""

from __future__ import annotations

from roleserve_core.testing import load_installed_plugin


def test_loads_owns_its_values_and_runs_its_workers() -> None:
    info = load_installed_plugin("kubernetes")
    assert (info.distribution, info.module) == (
        "roleserve-kubernetes",
        "roleserve_kubernetes.hooks",
    )
    assert (info.values, info.workers) == (
        ["kubernetes_status", "pod_network"],
        ["kubernetes_controller", "kubernetes_worker", "kubernetes_kubelet"],
    )
    assert "Kubernetes controller and worker launcher" in info.description
