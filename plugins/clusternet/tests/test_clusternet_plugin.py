"""The clusternet plugin loads through its entry point and owns what it says it owns."""

from __future__ import annotations

from roleserve_core.testing import load_installed_plugin


def test_loads_owns_its_values_and_runs_no_workers_yet() -> None:
    info = load_installed_plugin("clusternet")
    assert (info.distribution, info.module) == (
        "roleserve-clusternet",
        "roleserve_clusternet.hooks",
    )
    assert (info.values, info.workers) == ([], [])
    assert "no workers yet" in info.description
