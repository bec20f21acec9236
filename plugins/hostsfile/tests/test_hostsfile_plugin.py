"""The hostsfile plugin loads through its entry point and owns no values."""

from __future__ import annotations

from roleserve_core.testing import load_installed_plugin


def test_loads_owns_no_values_and_runs_no_workers_yet() -> None:
    info = load_installed_plugin("hostsfile")
    assert (info.distribution, info.module) == ("roleserve-hostsfile", "roleserve_hostsfile.hooks")
    assert (info.values, info.workers) == ([], [])
    assert "no workers yet" in info.description
