"""A third-party plugin that fails, seen from afar; one that refuses its settings, refused.

The plugins are distributions written by the test outside the repository: a module and its
``.dist-info`` (metadata and the ``roleserve.plugins`` entry point) in a directory of their
own, which ``PYTHONPATH`` hands to every process the test starts. Python's own
``importlib.metadata`` finds them there as it finds an installed wheel, so the node loads
them on the one path every installed plugin takes, and the test environment is left as it
was.

Two ways a plugin goes wrong, two outcomes:

- ``brittle`` raises in ``roleserve_workers`` (a bug): the node runs without it, and says so
  in its status, which ``ctl nodes`` marks and ``ctl plugins NODE`` details.
- ``picky`` is given a setting it does not allow (``interval = 0``, its ``Setting`` says at
  least 1; or two settings that do not go together, its own check): the node does not
  start, exit 2 and one line, and ``node config`` refuses the same file.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from roleserve_core.localcluster import LocalCluster
from roleserve_core.testing import poll_until, run_ctl

TIMEOUT = 90.0

BRITTLE = '''\
"""A plugin whose roleserve_workers raises: a bug, not a refusal."""

from roleserve_core import NodeContext, Worker, hookimpl

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    raise RuntimeError("no spool directory")
'''

PICKY = '''\
"""A plugin with a setting of allowed values, and a check across two settings."""

from roleserve_core import ConfigError, NodeContext, Setting, Worker, hookimpl

ROLESERVE_PLUGIN_API = 1

INTERVAL = Setting("interval", int, 10, "Seconds between two rounds.", minimum=1)
LOW = Setting("low", int, 1, "The lower mark.")
HIGH = Setting("high", int, 2, "The higher mark.")


@hookimpl
def roleserve_settings() -> list[Setting[int]]:
    return [INTERVAL, LOW, HIGH]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    if LOW.read(node.config) > HIGH.read(node.config):
        raise ConfigError("[plugins.picky] low must not be above high")
    return []
'''


def distribution(site: Path, plugin: str, version: str, source: str) -> Path:
    """Write the distribution ``<plugin>-plugin`` of module ``roleserve_<plugin>`` (the
    plugin's hooks) into ``site``, as an installer would; ``site`` itself."""
    module = f"roleserve_{plugin}"
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"{plugin}_plugin-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {plugin}-plugin\nVersion: {version}\n"
    )
    (info / "entry_points.txt").write_text(f"[roleserve.plugins]\n{plugin} = {module}\n")
    return site


def roleserve(*args: str, site: Path) -> subprocess.CompletedProcess[str]:
    """``roleserve ARGS`` in a process that finds the distributions of ``site``."""
    return subprocess.run(
        [sys.executable, "-m", "roleserve_core", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(site)},
    )


@pytest.fixture
def brittle_cluster(
    components: None,
    tmp_path: Path,
    first_address: ipaddress.IPv4Address,
    node_config: str,
    monkeypatch: pytest.MonkeyPatch,
) -> LocalCluster:
    """One node, UP and HEALTHY, that found the distribution of ``brittle``."""
    site = distribution(tmp_path / "site", "brittle", "0.3", BRITTLE)
    monkeypatch.setenv("PYTHONPATH", str(site))  # the node processes inherit it
    return LocalCluster(tmp_path / "cluster", 1, first_address=first_address, config=node_config)


@pytest.mark.timeout(300)
def test_a_plugin_that_fails_is_seen_in_the_nodes_status(
    brittle_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node started without it (its heartbeat is healthy), and every operator sees that:
    ``ctl nodes`` marks it, ``ctl plugins NODE`` says which plugin, its version and why."""
    monkeypatch.delenv("ROLESERVE_COMMAND", raising=False)  # hints name python -m
    cluster = brittle_cluster
    anyio.run(cluster.up)
    try:
        node_id = cluster.node_id(cluster.nodes[0])
        assert node_id is not None

        async def listed() -> list[dict[str, object]]:
            return list(
                json.loads(run_ctl(cluster.owner_directory, "nodes", "--json", check=True).stdout)
            )

        [node] = anyio.run(
            lambda: poll_until(
                "the node reporting its plugins",
                listed,
                lambda found: bool(found) and found[0]["failed_plugins"] == ["brittle"],
                timeout=TIMEOUT,
            )
        )
        assert (node["id"], node["health"]) == (node_id, "HEALTHY")

        _header, row, line = run_ctl(
            cluster.owner_directory, "nodes", check=True
        ).stdout.splitlines()
        assert re.split(r" {2,}", row.strip())[5] == "HEALTHY!"
        assert line == (
            f"{node_id}: ! plugin brittle failed: it started without; "
            f"`{shlex.quote(sys.executable)} -m roleserve_core ctl plugins {node_id}` says why"
        )

        plugins = {
            entry["name"]: entry
            for entry in json.loads(
                run_ctl(cluster.owner_directory, "plugins", node_id, "--json", check=True).stdout
            )
        }
        assert plugins["brittle"] == {
            "name": "brittle",
            "version": "0.3",
            "state": "failed",
            "error": "roleserve_workers raised RuntimeError: no spool directory",
        }
        assert plugins["controlplane"]["state"] == "loaded"
        assert (
            run_ctl(cluster.owner_directory, "plugins", node_id[:12], check=True).stdout.count(
                "failed"
            )
            == 1
        )
    finally:
        anyio.run(cluster.down)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "interval = 0",
            "[plugins.picky] interval must be an integer of at least 1, not 0 (Seconds between "
            "two rounds); correct it, or remove it for the default, 10",
        ),
        ("low = 3", "[plugins.picky] low must not be above high"),
    ],
)
@pytest.mark.timeout(120)
def test_a_plugin_that_refuses_its_settings_stops_the_node_before_it_starts(
    tmp_path: Path, section: str, message: str
) -> None:
    """Before, the node started UP and HEALTHY without the plugin, one line in its own log
    saying why, and ``node config`` printed that line and exited 0."""
    site = distribution(tmp_path / "site", "picky", "1.2", PICKY)
    data = tmp_path / "node"
    data.mkdir()
    config = data / "roleserve.toml"
    config.write_text(f"[plugins.picky]\n{section}\n")
    refusal = f"roleserve node: error: {config}: {message}\n"

    checked = roleserve("node", "config", "--data-dir", str(data), site=site)
    assert (checked.returncode, checked.stdout, checked.stderr) == (2, "", refusal)

    started = roleserve(
        "node", "run", "--data-dir", str(data), "--bootstrap", "--address", "127.0.0.1", site=site
    )
    assert (started.returncode, started.stdout) == (2, "")
    assert started.stderr == refusal
