"""The controlplane plugin loads through its entry point and declares its worker, values
and settings."""

from __future__ import annotations

import ipaddress
from dataclasses import fields
from pathlib import Path

import pytest

from roleserve_controlplane import hooks
from roleserve_controlplane.consensus import MaintenancePolicy
from roleserve_controlplane.curator import ClusterNetworkError
from roleserve_controlplane.settings import SETTINGS, ControlPlaneSettings, MaintenanceSettingError
from roleserve_core import (
    NETWORK,
    ROLES,
    ConfigError,
    ConsensusMember,
    FinalError,
    KubernetesWorker,
    NetworkStatus,
    NodeContext,
    NodeRoles,
    ValueRegistry,
)
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
        ("heartbeat_ms", "int", 250),
        ("election_ms", "int", 1250),
        ("cluster_network", "str", "10.192.0.0/11"),
        ("node_prefix_length", "int", 24),
        ("node_certificate_lifetime", "int", 30 * 24 * 3600),
        ("history_retention", "int", 300),
        ("quota_backend_bytes", "int", 2 * 1024**3),
        ("defrag_free_bytes", "int", 64 * 1024),
        ("defrag_free_ratio", "float", 0.5),
        ("etcd_gc_percent", "int", 25),
    ]
    assert [field.name for field in fields(ControlPlaneSettings)] == [s.name for s in SETTINGS]
    assert ControlPlaneSettings.of({}) == ControlPlaneSettings()
    checked = {"etcd": "/opt/etcd", "lease_ttl": 3, "heartbeat_ms": 25, "election_ms": 250}
    assert ControlPlaneSettings.of(checked) == ControlPlaneSettings("/opt/etcd", 3, 25, 250)
    network = {"cluster_network": "fd00:10::/48", "node_prefix_length": 64}
    assert str(ControlPlaneSettings.of(network).network.prefix(1)) == "fd00:10:0:1::/64"


@pytest.mark.parametrize(
    ("network", "length", "message"),
    [
        (
            "10.192.0.0/11",
            11,
            "node prefix length /11 must be longer than the cluster network's /11",
        ),
        ("10.192.0.0/11", 33, "at most /32"),
        ("8.8.0.0/16", 24, "cluster network 8.8.0.0/16 is not a private network"),
        ("127.0.0.0/8", 24, "not a private network"),
        ("10.192.0.1/11", 24, "'10.192.0.1/11' is not a network in CIDR form"),
        ("banana", 24, "is not a network in CIDR form"),
        ("fd00::0/48", 64, "not in canonical form (fd00::/48)"),
    ],
)
def test_a_bad_cluster_network_is_refused_in_one_line_when_used(
    network: str, length: int, message: str
) -> None:
    config = {"cluster_network": network, "node_prefix_length": length}
    settings = ControlPlaneSettings.of(config)  # only a bootstrap uses it
    with pytest.raises(ClusterNetworkError) as refused:
        _ = settings.network
    assert isinstance(refused.value, ConfigError)
    assert isinstance(refused.value, FinalError)  # the worker is not restarted on it
    assert str(refused.value).startswith("[plugins.controlplane] ")
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("name", "refused", "accepted"),
    [
        ("lease_ttl", 0, 1),
        ("heartbeat_ms", 0, 1),
        ("election_ms", 4, 50_000),
        ("election_ms", 50_001, 5),
        ("node_prefix_length", 0, 128),
        ("node_prefix_length", 129, 1),
        ("cluster_network", "8.8.0.0/16", "fd00:10::/48"),
        ("cluster_network", "10.192.0.1/11", "10.192.0.0/11"),
    ],
)
def test_each_setting_refuses_what_its_worker_could_not_use(
    name: str, refused: object, accepted: object
) -> None:
    """Checked before the node starts (``node config`` too), not when the worker (or etcd)
    meets the value and stays DEAD."""
    [setting] = [setting for setting in SETTINGS if setting.name == name]
    assert setting.not_allowed(refused) is not None
    assert setting.not_allowed(accepted) is None


def test_maintenance_settings_make_the_policy_and_a_bad_one_is_refused_in_one_line() -> None:
    settings = ControlPlaneSettings.of(
        {"quota_backend_bytes": 8 << 20, "defrag_free_bytes": 0, "defrag_free_ratio": 0.25}
    )
    assert settings.maintenance == MaintenancePolicy(
        defrag_free_bytes=0, defrag_free_ratio=0.25, quota_backend_bytes=8 << 20
    )
    refusals: list[tuple[dict[str, float], str]] = [
        ({"quota_backend_bytes": 0}, "quota_backend_bytes must be an integer of at least 1"),
        ({"defrag_free_ratio": 1.5}, "defrag_free_ratio must be a number from 0 to 1, not 1.5"),
        ({"history_retention": 0}, "history_retention must be an integer of at least 1"),
        ({"etcd_gc_percent": 0}, "etcd_gc_percent must be an integer of at least 1, not 0"),
    ]
    for config, named in refusals:
        with pytest.raises(MaintenanceSettingError) as refused:
            _ = (
                ControlPlaneSettings.of(config).maintenance,
                ControlPlaneSettings.of(config).retention,
                ControlPlaneSettings.of(config).gc_percent,
            )
        assert isinstance(refused.value, FinalError)
        assert str(refused.value).startswith("[plugins.controlplane] ")
        assert named in str(refused.value)


def test_contributes_etcd_metrics_on_consensus_members_only() -> None:
    """The metrics plugin's hook, implemented without importing that plugin: ``etcd`` on
    the node's local exporter host while the node holds consensus_member."""
    registry = ValueRegistry()
    registry.declare(ROLES, "core")
    registry.declare(NETWORK, "core")
    node = NodeContext("controlplane", registry.scoped("controlplane"), Path("/nonexistent"))
    assert hooks.roleserve_metrics_exporters(node) == []  # no roles yet
    registry.set(ROLES, NodeRoles(kubernetes_worker=KubernetesWorker()), by="core")
    registry.set(NETWORK, NetworkStatus(ipaddress.ip_address("10.0.0.7")), by="core")
    assert hooks.roleserve_metrics_exporters(node) == []
    member = ConsensusMember(ca_certificate=b"", peer_certificate=b"", peers=())
    registry.set(ROLES, NodeRoles(consensus_member=member), by="core")
    assert hooks.roleserve_metrics_exporters(node) == [("etcd", "http://127.0.0.1:7842/metrics")]
    registry.set(NETWORK, NetworkStatus(ipaddress.ip_address("127.0.77.12")), by="core")
    assert hooks.roleserve_metrics_exporters(node) == [("etcd", "http://127.0.77.12:7842/metrics")]
