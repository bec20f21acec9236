"""``roleserve cluster up --netns`` as an operator runs it (root): three nodes, each in a
network namespace of its own at an address of 198.18.0.0/15, joined to a bridge on the
host, reached by ``ctl`` from the host; ``cluster down`` leaves no namespace, veth or
bridge behind.

One cluster (``netns_cluster``) serves the module: forming it takes most of its time. The
last test takes it down. (The clusternet mesh tests are to join this module, on the same
cluster.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from roleserve_core.localcluster import default_roles, netns
from roleserve_core.localcluster.netns import NetnsPlan, subnet_for
from roleserve_core.testing import require_real

TIMEOUT = 120.0
ROLESERVE = [sys.executable, "-m", "roleserve_core"]


def roleserve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ROLESERVE, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env={**os.environ, **(env or {})},
    )


def status(directory: Path) -> list[dict[str, Any]]:
    shown = roleserve("cluster", "status", "--json", "--dir", str(directory))
    assert shown.returncode == 0, shown.stderr
    nodes: list[dict[str, Any]] = json.loads(shown.stdout)
    return nodes


@dataclass(frozen=True)
class NetnsCluster:
    directory: Path
    plan: NetnsPlan
    made: str
    """What ``cluster up`` printed."""


@pytest.fixture(scope="module")
def netns_cluster(
    components: None, node_config: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NetnsCluster]:
    """Three nodes made by ``cluster up --netns --detach`` (with the e2e roleserve.toml)."""
    require_real(
        "network namespaces (root, iproute2, pyroute2)",
        netns.unsupported() is None,
        f"{netns.unsupported()}; run as root after .ci/system-packages",
    )
    directory = tmp_path_factory.mktemp("netns") / "cluster"
    for index in (1, 2, 3):
        (directory / f"n{index}").mkdir(parents=True)
        (directory / f"n{index}" / "roleserve.toml").write_text(node_config)
    plan = NetnsPlan(subnet_for(directory), 3)
    made = roleserve(
        "cluster", "up", "--netns", "--nodes", "3", "--detach", "--dir", str(directory)
    )
    try:
        assert made.returncode == 0, made.stdout + made.stderr
        yield NetnsCluster(directory, plan, made.stdout)
    finally:
        roleserve("cluster", "down", "--dir", str(directory))
        netns.remove(plan)  # whatever a failed test left


def test_each_node_runs_in_its_own_namespace_at_its_own_address(
    netns_cluster: NetnsCluster,
) -> None:
    plan = netns_cluster.plan
    nodes = status(netns_cluster.directory)
    assert [node["node"] for node in nodes] == ["n1", "n2", "n3"]
    for index, node in enumerate(nodes, start=1):
        assert (node["address"], node["namespace"]) == (
            str(plan.address(index)),
            plan.namespace(index),
        )
        known = node["cluster"]
        assert (known["state"], known["health"]) == ("UP", "HEALTHY"), node
        assert known["address"] == str(plan.address(index))  # what the node itself reports
        assert set(known["roles"]) == set(default_roles(index, 3)), node
        # The node process (not a wrapper) is in the namespace: ip netns exec execs it.
        inside = os.stat(f"/proc/{node['pid']}/ns/net").st_ino
        assert inside == os.stat(f"/run/netns/{plan.namespace(index)}").st_ino
        assert "node" in Path(f"/proc/{node['pid']}/cmdline").read_bytes().decode().split("\0")
    assert f"bridge {plan.bridge} at {plan.host_address}/24" in netns_cluster.made


def test_ctl_on_the_host_reaches_every_node(netns_cluster: NetnsCluster) -> None:
    """Each node's curator, as the endpoint of ``ctl leader``, and each node's own
    NodeManagement service (``ctl tree``), through the bridge."""
    env = {"ROLESERVE_CREDENTIALS": str(netns_cluster.directory / "owner")}
    nodes = status(netns_cluster.directory)
    for node in nodes:
        leader = roleserve("ctl", "--endpoint", node["address"], "leader", env=env)
        assert leader.returncode == 0, leader.stderr
        tree = roleserve("ctl", "tree", node["cluster"]["id"], "--json", env=env)
        assert tree.returncode == 0, tree.stderr
        assert json.loads(tree.stdout)


def test_up_without_netns_on_it_is_refused(netns_cluster: NetnsCluster) -> None:
    again = roleserve("cluster", "up", "--detach", "--dir", str(netns_cluster.directory))
    assert again.returncode == 1
    assert "runs in network namespaces (--netns); run `cluster up` with --netns" in again.stderr
    assert all(node["pid"] is not None for node in status(netns_cluster.directory))


def test_down_leaves_no_namespace_veth_or_bridge(netns_cluster: NetnsCluster) -> None:
    """Last: it takes the module's cluster down."""
    plan = netns_cluster.plan
    assert netns.leftovers(plan)
    down = roleserve("cluster", "down", "--dir", str(netns_cluster.directory))
    assert down.returncode == 0, down.stderr
    assert "removed the network: " in down.stdout
    assert not netns.leftovers(plan)
    assert [node["pid"] for node in status(netns_cluster.directory)] == [None] * 3
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert plan.prefix not in listed.stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert plan.bridge not in links.stdout
