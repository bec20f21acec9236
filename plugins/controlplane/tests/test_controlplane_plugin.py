"""The controlplane plugin loads through its entry point and declares its worker and values."""

from __future__ import annotations

from roleserve_core.testing import load_installed_plugin


def test_loads_with_its_worker_and_values() -> None:
    info = load_installed_plugin("controlplane")
    assert (info.distribution, info.module) == (
        "roleserve-controlplane",
        "roleserve_controlplane.hooks",
    )
    assert (info.values, info.workers) == (
        ["local_control_plane", "bootstrapped"],
        ["controlplane"],
    )
    assert info.reads == ["bootstrap", "network", "node_credentials", "roles"]
