"""The controlplane plugin loads through its entry point and declares its worker, values
and settings."""

from __future__ import annotations

from dataclasses import fields

from roleserve_controlplane.settings import SETTINGS, ControlPlaneSettings
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


def test_declares_its_settings_once() -> None:
    """The records are the one source of names, defaults and docs; the worker's dataclass
    has a field for each, and builds from a checked config or from none."""
    info = load_installed_plugin("controlplane")
    assert info.settings == list(SETTINGS)
    assert [(s.name, s.type_name, s.default) for s in info.settings] == [
        ("etcd", "str | None", None),
        ("lease_ttl", "int", 10),
        ("heartbeat_ms", "int", 100),
        ("election_ms", "int", 1000),
    ]
    assert [field.name for field in fields(ControlPlaneSettings)] == [s.name for s in SETTINGS]
    assert ControlPlaneSettings.of({}) == ControlPlaneSettings()
    checked = {"etcd": "/opt/etcd", "lease_ttl": 3, "heartbeat_ms": 25, "election_ms": 250}
    assert ControlPlaneSettings.of(checked) == ControlPlaneSettings("/opt/etcd", 3, 25, 250)
