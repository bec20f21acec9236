"""The metrics plugin loads through its entry point and owns what it says it owns."""

from __future__ import annotations

from pathlib import Path

from roleserve_metrics import hooks

from roleserve_core.testing import PluginHarness, load_installed_plugin


def test_installed_entry_point_loads() -> None:
    info = load_installed_plugin("metrics")
    assert (info.distribution, info.module) == ("roleserve-metrics", "roleserve_metrics.hooks")


def test_owns_its_values_and_runs_no_workers_yet(
    plugin_manager: PluginHarness, tmp_path: Path
) -> None:
    plugin_manager.register(hooks, "metrics")
    plugin_manager.runtime(tmp_path)
    info = plugin_manager.plugins.info("metrics")
    assert (info.values, info.workers) == ([], [])
    assert "no workers yet" in info.description
