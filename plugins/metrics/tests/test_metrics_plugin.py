"""The metrics plugin loads through its entry point, defines its hook and declares its
settings and worker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roleserve_core import ConfigError
from roleserve_core.testing import PluginHarness, load_installed_plugin
from roleserve_metrics import hooks
from roleserve_metrics.exporters import HOOK, Exporter, exporter_of


def test_loads_with_its_worker_and_settings() -> None:
    info = load_installed_plugin("metrics")
    assert (info.distribution, info.module) == ("roleserve-metrics", "roleserve_metrics.hooks")
    assert (info.values, info.workers) == ([], ["metrics", "metrics_discovery"])
    assert [setting.name for setting in info.settings] == [
        "port",
        "node_exporter",
        "node_exporter_port",
        "upstream_timeout",
        "discovery",
    ]
    assert "roleserve_add_hookspecs" in info.hooks


def test_the_hook_is_defined_for_other_plugins() -> None:
    plugins = PluginHarness()
    plugins.register(hooks, "metrics")
    assert hasattr(plugins.plugins.manager.hook, HOOK)
    spec = getattr(plugins.plugins.manager.hook, HOOK).spec
    assert spec is not None
    assert spec.argnames == ("node",)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"port": 0}, "port must be an integer from 1 to 65535, not 0"),
        ({"node_exporter_port": 70000}, "node_exporter_port must be an integer from 1 to 65535"),
        ({"upstream_timeout": 0.0}, "upstream_timeout must be a number above 0, not 0.0"),
        ({"discovery": "members"}, 'discovery must be one of "consensus", "all", "none", not'),
    ],
)
def test_settings_refused(config: dict[str, object], message: str, tmp_path: Path) -> None:
    """The core refuses them before the node starts (they once failed only the plugin)."""
    plugins = PluginHarness()
    plugins.register(hooks, "metrics")
    refused = re.escape(f"roleserve.toml: [plugins.metrics] {message}")
    with pytest.raises(ConfigError, match="^" + refused):
        plugins.runtime(tmp_path, config={"metrics": config})


@pytest.mark.parametrize(
    "item",
    [
        ("Bad Name", "http://127.0.0.1:1/metrics"),
        ("ok", "https://example.org/metrics"),
        ("ok", 42),
        "ok",
        ("a", "b", "c"),
    ],
)
def test_malformed_exporters_refused(item: object) -> None:
    with pytest.raises(ValueError, match="exporter"):
        exporter_of(item, "plugin")


def test_an_exporter_is_a_url_or_a_collector() -> None:
    with pytest.raises(ValueError, match="exactly one of a URL or a collector"):
        Exporter("both")
    exporter = exporter_of(("etcd", "http://127.0.0.1:7842/metrics"), "controlplane")
    assert (exporter.name, exporter.owner, exporter.registry) == ("etcd", "controlplane", None)
