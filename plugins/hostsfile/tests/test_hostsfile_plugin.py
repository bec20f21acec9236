"""The hostsfile plugin loads through its entry point, runs its worker, takes its settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from roleserve_core import CLUSTER_NODES, NETWORK, NODE_ID, ConfigError
from roleserve_core.testing import PluginHarness, load_installed_plugin
from roleserve_hostsfile import hooks
from roleserve_hostsfile.settings import HostsfileSettings


def test_loads_runs_its_worker_and_owns_no_values() -> None:
    info = load_installed_plugin("hostsfile")
    assert (info.distribution, info.module) == ("roleserve-hostsfile", "roleserve_hostsfile.hooks")
    assert (info.values, info.workers) == ([], ["hostsfile"])
    assert [setting.name for setting in info.settings] == ["path", "hostname", "machine_id"]


def test_the_worker_always_runs_and_reads_what_keeps_cluster_nodes(tmp_path: Path) -> None:
    plugins = PluginHarness()
    plugins.register(hooks, "hostsfile")
    [(plugin, worker)] = plugins.runtime(tmp_path).workers.values()
    assert (plugin, worker.name, worker.when) == ("hostsfile", "hostsfile", None)
    assert set(worker.reads) == {CLUSTER_NODES, NETWORK, NODE_ID}


def test_settings_default_to_etc_hosts_and_nothing_else() -> None:
    assert HostsfileSettings.of({}) == HostsfileSettings(Path("/etc/hosts"), False, None)
    config = {"path": "/run/hosts", "hostname": True, "machine_id": "/etc/machine-id"}
    assert HostsfileSettings.of(config) == HostsfileSettings(
        Path("/run/hosts"), True, Path("/etc/machine-id")
    )


@pytest.mark.parametrize("key", ["path", "machine_id"])
def test_a_relative_path_refuses_the_node_naming_the_setting(key: str, tmp_path: Path) -> None:
    """Relative to the node's working directory is no place an operator means; the core
    refuses it before the node starts (it once failed only the plugin)."""
    plugins = PluginHarness()
    plugins.register(hooks, "hostsfile")
    refused = rf"\[plugins.hostsfile\] {key} must be an absolute path"
    with pytest.raises(ConfigError, match=refused):
        plugins.runtime(tmp_path, config={"hostsfile": {key: "hosts"}})
