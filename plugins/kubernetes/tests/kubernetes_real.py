"""The real tests' kit: what they need (root, containerd, runc, ctr, the CNI plugins,
busybox, nsenter), a network namespace of the test's own, a data directory 200 characters
long (containerd's sockets are not there: ``NodeContext.runtime_dir``), a node running the
worker, and a pod through the plugin's CRI client.

Every address the pods and the bridge get (10.192.x.x) lives inside the namespace the
test made, which is removed after it with whatever is left in it.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from roleserve_core import CLUSTER_NODES, NODE_ID, ClusterNodes, KubernetesWorker, NodeRoles
from roleserve_core.testing import (
    NodeHarness,
    StartNode,
    node_record,
    require_real,
    start_plugin_node,
)
from roleserve_kubernetes.cri import CriClient
from roleserve_kubernetes.image import SANDBOX_IMAGE
from roleserve_kubernetes.layout import WorkerLayout
from roleserve_kubernetes.proto import cri_pb2

from .kubernetes_hooks import KubernetesHooks

WORKER = NodeRoles(kubernetes_worker=KubernetesWorker())
DN = "root.role.kubernetes_worker"
CONTAINERD_DN = f"{DN}.containerd"
POD_NETWORK_DN = f"{DN}.pod_network"
NODE_ID_OF_TEST = "node-" + "ab" * 16
CNI_BIN = Path("/usr/lib/cni")


def missing_component() -> str:
    """What the real tests lack here, or ``""``."""
    if os.geteuid() != 0:
        return "root"
    for tool in ("containerd", "runc", "ctr", "ip", "nsenter"):
        if shutil.which(tool) is None:
            return tool
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN / plugin).is_file():
            return f"{CNI_BIN / plugin}"
    if not Path("/bin/busybox").is_file():
        return "/bin/busybox"
    return ""


def needs_real_containerd() -> None:
    missing = missing_component()
    require_real(
        "root, containerd, runc, ctr, the CNI plugins and busybox-static",
        not missing,
        f"missing: {missing}; apt-get install containerd runc containernetworking-plugins "
        "busybox-static, run as root",
    )


@pytest.fixture
def worker_netns() -> Iterator[str]:
    """A network namespace with its loopback up; removed after the test."""
    needs_real_containerd()
    with namespace("rsk8s") as name:
        yield name


@contextmanager
def namespace(kind: str) -> Iterator[str]:
    """A network namespace ``<kind>-<random tag>`` with its loopback up (containerd's
    metrics and CRI's stream server listen on 127.0.0.1 in it); removed at the end, with
    whatever is left in it (the pods' bridge). For the fixture and the benchmark."""
    name = f"{kind}-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=30)
    try:
        subprocess.run(
            ["ip", "-n", name, "link", "set", "lo", "up"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


DEEP = 200
"""Characters of the data directory the real tests run in: deeper than any unix socket's
path may be, so a socket there would fail."""


def deep_directory(base: Path, length: int = DEEP) -> Path:
    """A directory under ``base`` whose path is ``length`` characters long."""
    return base / ("d" * (length - len(str(base)) - 1))


@pytest.fixture
def deep_dir(tmp_path: Path) -> Path:
    """A data directory 200 characters long (``deep_directory``)."""
    directory = deep_directory(tmp_path)
    assert len(str(directory)) == DEEP
    return directory


@dataclass
class WorkerNode:
    harness: NodeHarness
    layout: WorkerLayout
    prefix: ipaddress.IPv4Network
    """The node's curator-allocated prefix."""


async def start_worker(
    node: StartNode,
    data_dir: Path,
    netns: str | None,
    prefix: str = "10.192.7.0/24",
    node_id: str = NODE_ID_OF_TEST,
    **settings: object,
) -> WorkerNode:
    """A node running the plugin's worker with the role, its ID and its prefix set."""
    plugins = {"kubernetes": KubernetesHooks(netns=netns)}
    harness = await start_plugin_node(node, data_dir, plugins, config={"kubernetes": settings})
    harness.set(NODE_ID, node_id)
    record = node_record(node_id, cluster_prefix=prefix)
    harness.set(CLUSTER_NODES, ClusterNodes({node_id: record}, backlogged=True))
    harness.set_roles(WORKER)
    layout = WorkerLayout.of(harness.runtime.context("kubernetes"))
    return WorkerNode(harness, layout, ipaddress.IPv4Network(prefix))


def sandbox_config(name: str, log_directory: Path) -> cri_pb2.PodSandboxConfig:
    return cri_pb2.PodSandboxConfig(
        metadata=cri_pb2.PodSandboxMetadata(name=name, uid=f"uid-{name}", namespace="test"),
        hostname=name,
        log_directory=str(log_directory),
    )


def container_config(name: str, *command: str) -> cri_pb2.ContainerConfig:
    return cri_pb2.ContainerConfig(
        metadata=cri_pb2.ContainerMetadata(name=name),
        image=cri_pb2.ImageSpec(image=SANDBOX_IMAGE),
        command=list(command),
        log_path=f"{name}.log",
    )


async def run_pod(cri: CriClient, name: str, log_directory: Path, *command: str) -> tuple[str, str]:
    """A sandbox and one container running ``command`` in it; (sandbox ID, container ID).
    CRI makes ``log_directory``."""
    sandbox = sandbox_config(name, log_directory)
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await cri.create_container(sandbox_id, container_config(name, *command), sandbox)
    await cri.start_container(container_id)
    return sandbox_id, container_id
