"""The kit of the e2e modules that run ``roleserve cluster up --netns`` (imported by them):
the CLI run as a subprocess, the cluster made and taken down, its nodes as the curator
knows them, and a wait on a condition seen from the host.

Each module makes one cluster (``netns_cluster_up``) for all its tests: forming it takes most
of the time. Its nodes' addresses (198.18.0.0/15) come from the cluster's directory
(``subnet_for``), so two runs never share them.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio

from roleserve_core.localcluster import netns
from roleserve_core.localcluster.netns import NetnsPlan, subnet_for
from roleserve_core.rundir import node_runtime_dir
from roleserve_core.testing import poll_until, require_real, run_ctl

TIMEOUT = 120.0
"""Seconds a CLI command may take."""
ROLESERVE = [sys.executable, "-m", "roleserve_core"]
LISTEN_PORT = 7838
"""clusternet's WireGuard port on every node."""

T = TypeVar("T")


def roleserve(
    *args: str, env: dict[str, str] | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ROLESERVE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
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

    @property
    def credentials(self) -> Path:
        """The owner's access directory, for ``ctl``."""
        return self.directory / "owner"

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """The cluster network ``up`` gave the cluster, its own on this machine."""
        return ipaddress.ip_network((self.directory / "cluster-network").read_text().strip())

    def data_dir(self, index: int) -> Path:
        """Node ``index``'s data directory."""
        return self.directory / f"n{index}"

    def containerd_socket(self, index: int) -> Path:
        """Node ``index``'s containerd socket (CRI; its shims' ``-address``): in the node's
        runtime directory, on the host's file system (the node shares the host's
        mounts)."""
        return node_runtime_dir(self.data_dir(index)) / "kubernetes" / "containerd.sock"


def require_netns() -> None:
    require_real(
        "network namespaces (root, iproute2, nsenter, pyroute2)",
        netns.unsupported() is None,
        f"{netns.unsupported()}; run as root after .ci/system-packages",
    )


@contextmanager
def netns_cluster_up(
    directory: Path, config: str, timeout: float = TIMEOUT
) -> Iterator[NetnsCluster]:
    """Three nodes made by ``cluster up --netns --detach`` in ``directory``, each with
    ``config`` as its roleserve.toml; taken down after, with whatever network a failed
    test left."""
    require_netns()
    for index in (1, 2, 3):
        (directory / f"n{index}").mkdir(parents=True)
        (directory / f"n{index}" / "roleserve.toml").write_text(config)
    plan = NetnsPlan(subnet_for(directory), 3)
    made = roleserve(
        "cluster", "up", "--netns", "--nodes", "3", "--detach", "--dir", str(directory),
        timeout=timeout,
    )  # fmt: skip
    try:
        assert made.returncode == 0, made.stdout + made.stderr
        yield NetnsCluster(directory, plan, made.stdout)
    finally:
        roleserve("cluster", "down", "--dir", str(directory), timeout=timeout)
        netns.remove(plan)


def wait_for(
    what: str, look: Callable[[], T], predicate: Callable[[T], bool] = bool, timeout: float = 30.0
) -> T:
    """``poll_until`` for a synchronous ``look`` (a command run on the host)."""

    async def looking() -> T:
        return look()

    return anyio.run(functools.partial(poll_until, what, looking, predicate, timeout=timeout))


def run(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout


@dataclass(frozen=True)
class MeshNode:
    """One node as the curator knows it (``ctl nodes --json``), with where it runs."""

    index: int
    id: str
    namespace: str
    interface: str
    endpoint: str
    """``<its address on the bridge>:7838``, as the others' peer entries name it."""
    prefix: ipaddress.IPv4Network
    announced: tuple[str, ...]
    public_key: str

    @property
    def pod_network(self) -> ipaddress.IPv4Network:
        """The kubernetes plugin's pod network on this worker: the upper half of its
        prefix (the lower half holds the node's own mesh address)."""
        return list(self.prefix.subnets(prefixlen_diff=1))[1]

    @property
    def expected_announced(self) -> tuple[str, ...]:
        """What it announces: its own mesh address and its pod network."""
        return (f"{self.address}/32", str(self.pod_network))

    @property
    def address(self) -> ipaddress.IPv4Address:
        """Its address in the mesh: the first of its prefix."""
        return self.prefix[1]


def mesh_nodes(cluster: NetnsCluster) -> list[MeshNode]:
    """The nodes that are UP, once each has a prefix and has announced its key."""
    listed = run_ctl(cluster.credentials, "nodes", "--json", timeout=TIMEOUT)
    assert listed.returncode == 0, listed.stderr
    plan = cluster.plan
    index_of = {str(plan.address(index)): index for index in (1, 2, 3)}
    nodes = []
    for node in json.loads(listed.stdout):
        if node["state"] != "UP":
            continue
        announced = node["clusternet"]
        assert node["cluster_prefix"] is not None, node
        assert announced is not None, node
        index = index_of[node["address"]]
        nodes.append(
            MeshNode(
                index=index,
                id=node["id"],
                namespace=plan.namespace(index),
                interface=plan.wireguard_interface(index),
                endpoint=f"{plan.address(index)}:{LISTEN_PORT}",
                prefix=ipaddress.IPv4Network(node["cluster_prefix"]),
                announced=tuple(announced["prefixes"]),
                public_key=announced["wireguard_pubkey"],
            )
        )
    return sorted(nodes, key=lambda node: node.index)
