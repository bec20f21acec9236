"""The clusternet plugin loads through its entry point and owns what it says it owns."""

from __future__ import annotations

from pathlib import Path

from roleserve_clusternet import hooks

from roleserve_core.testing import PluginHarness, load_installed_plugin


def test_installed_entry_point_loads() -> None:
    info = load_installed_plugin("clusternet")
    assert (info.distribution, info.module) == (
        "roleserve-clusternet",
        "roleserve_clusternet.hooks",
    )


def test_owns_its_values_and_runs_no_workers_yet(
    plugin_manager: PluginHarness, tmp_path: Path
) -> None:
    plugin_manager.register(hooks, "clusternet")
    plugin_manager.runtime(tmp_path)
    info = plugin_manager.plugins.info("clusternet")
    assert (info.values, info.workers) == ([], [])
    assert "no workers yet" in info.description
