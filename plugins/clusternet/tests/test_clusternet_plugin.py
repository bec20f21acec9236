"""The clusternet plugin loads through its entry point, runs its worker, takes its settings."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from roleserve_clusternet import hooks
from roleserve_clusternet.settings import ClusternetSettings
from roleserve_core import (
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    NODE_ID,
    ConfigError,
    State,
)
from roleserve_core.testing import NodeHarness, PluginHarness, load_installed_plugin


def test_loads_runs_its_worker_and_owns_its_status() -> None:
    info = load_installed_plugin("clusternet")
    assert (info.distribution, info.module) == (
        "roleserve-clusternet",
        "roleserve_clusternet.hooks",
    )
    assert (info.values, info.workers) == (["clusternet_status"], ["clusternet"])
    assert [setting.name for setting in info.settings] == [
        "interface",
        "listen_port",
        "keepalive",
        "mtu",
        "cluster_network",
        "reconcile_interval",
        "wireguard_go",
        "off",
    ]


def test_the_worker_always_runs_and_reads_what_keeps_cluster_nodes(tmp_path: Path) -> None:
    plugins = PluginHarness()
    plugins.register(hooks, "clusternet")
    [(plugin, worker)] = plugins.runtime(tmp_path).workers.values()
    assert (plugin, worker.name, worker.when) == ("clusternet", "clusternet", None)
    assert set(worker.reads) == {CLUSTER_NODES, CURATOR_CONNECTION, NODE_ID}


@pytest.mark.anyio
async def test_with_a_reason_to_be_off_the_worker_says_it_and_runs_nothing(
    node: Callable[..., Awaitable[NodeHarness]], tmp_path: Path
) -> None:
    """A loopback cluster's nodes share one network namespace (``cluster up`` sets ``off``):
    the worker is there, not running (NEW, never HEALTHY), with the reason as its note."""
    plugins = PluginHarness()
    plugins.register(hooks, "clusternet")
    reason = "the nodes share one network namespace; `cluster up --netns` runs the mesh"
    runtime = plugins.runtime(tmp_path, config={"clusternet": {"off": reason}})
    [(_plugin, worker)] = runtime.workers.values()
    assert (worker.name, worker.reads) == ("clusternet", ())  # no cluster_nodes kept alive
    harness = await node(runtime)
    status = await harness.wait_status("root.role.clusternet", lambda s: s.note != "")
    assert (status.state, status.note) == (State.NEW, f"off: {reason}")
    assert not (tmp_path / "plugins" / "clusternet" / "private.key").exists()


def test_settings_defaults() -> None:
    assert ClusternetSettings.of({}) == ClusternetSettings(
        "clusternet", 7838, 0, 1420, ipaddress.ip_network("10.192.0.0/11"), 60.0, None
    )


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("interface", "a-name-far-too-long", "1 to 15 letters"),
        ("listen_port", 0, "an integer from 1 to 65535"),
        ("keepalive", -1, "an integer from 0 to 65535"),
        ("mtu", 576, "an integer from 1280 to 65535"),
        ("cluster_network", "10.192.0.1/11", "a network in CIDR form"),
        ("reconcile_interval", 0, "a number above 0"),
    ],
)
def test_a_setting_that_cannot_work_refuses_the_node_naming_it(
    key: str, value: object, expected: str, tmp_path: Path
) -> None:
    """The core refuses it before the node starts, as a wrong type: it once failed only the
    plugin, and the node ran without clusternet."""
    plugins = PluginHarness()
    plugins.register(hooks, "clusternet")
    refused = rf"\[plugins.clusternet\] {key} must be {re.escape(expected)}"
    with pytest.raises(ConfigError, match=refused):
        plugins.runtime(tmp_path, config={"clusternet": {key: value}})
