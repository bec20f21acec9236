"""Two real nodes on one machine (a loopback local cluster of two), each with a real
kubelet: node 1 is a controller and a worker, node 2 a worker only, so its kubelet has no
apiserver of its own and takes node 1's.

What is checked, with the real kube binaries (``./dev kube-binaries``), etcd, containerd:
each kubelet registers a Node named after its node ID, becomes Ready and runs a pod in a
cgroup root of its own; a kubelet's credentials may change its own Node and no other's
(the node authorizer and NodeRestriction); removing kubernetes_worker leaves no shim,
container or cgroup of that node and its Node goes NotReady, while the other node's pod
runs on; adding it back makes the Node Ready again.

One cluster for the module (a control plane and two kubelets on two shared cores take a
minute to settle); each test leaves it as it found it: both Nodes Ready, both pods running.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from roleserve_controlplane.testing import require_node_etcd
from roleserve_core import LocalCluster, LocalNode, node_runtime_dir, read_record
from roleserve_core.testing import poll_until, require_real, run_ctl
from roleserve_kubernetes.cgroups import cgroup_hierarchies, cgroup_root
from roleserve_kubernetes.leftovers import mounts_under, shim_pids
from roleserve_kubernetes.testing import require_kube_binaries

from .kubernetes_real import missing_component

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]

SETTLE = 240.0
"""Seconds for the cluster's Kubernetes to settle (apiserver, two kubelets, on a loaded
two-core machine)."""
NOT_READY = 150.0
"""Seconds for a Node whose kubelet stopped to be marked NotReady: the controller-manager's
node monitor grace period (50 s) and its checks, under load."""
POD_IMAGE = "roleserve.local/sandbox:busybox"
GREETING = "hello from the pod"


@pytest.fixture(scope="module")
def kubectl() -> Path:
    """The pinned build's kubectl, once everything a real kubelet needs is there."""
    bin_dir = require_kube_binaries()
    missing = missing_component()
    require_real(
        "root, containerd, runc, ctr, the CNI plugins and busybox-static",
        not missing,
        f"missing: {missing}; apt-get install containerd runc containernetworking-plugins "
        "busybox-static, run as root",
    )
    require_node_etcd()
    return bin_dir / "kubectl"


@pytest.fixture(scope="module")
def cluster(kubectl: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Two node processes on a random 127.X.Y.0/24, UP and HEALTHY."""
    first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
    local = LocalCluster(tmp_path_factory.mktemp("k"), 2, first_address=first)
    try:
        anyio.run(local.up)
        yield local
    finally:
        anyio.run(local.down)


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An admin kubeconfig, by ``roleserve ctl kubeconfig`` once the apiserver is ready."""
    out = tmp_path_factory.mktemp("admin") / "kubeconfig"

    async def written() -> subprocess.CompletedProcess[str]:
        return run_ctl(cluster.owner_directory, "kubeconfig", "--out", str(out), "--force")

    anyio.run(
        lambda: poll_until(
            "an admin kubeconfig", written, lambda r: r.returncode == 0, timeout=SETTLE
        )
    )
    return out


async def kube(kubectl: Path, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl --kubeconfig KUBECONFIG ...``, whatever it exits with."""
    command = [str(kubectl), "--kubeconfig", str(kubeconfig), "--request-timeout=20s", *args]
    result = await anyio.run_process(command, check=False)
    return subprocess.CompletedProcess(
        command, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


async def get(kubectl: Path, kubeconfig: Path, *what: str) -> dict[str, Any]:
    result = await kube(kubectl, kubeconfig, "get", *what, "-o", "json")
    assert result.returncode == 0, result.stderr
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def ready(node: dict[str, Any]) -> str:
    """The Node's Ready condition: True, False or Unknown."""
    for condition in node["status"].get("conditions", []):
        if condition["type"] == "Ready":
            return str(condition["status"])
    return "absent"


async def wait_ready(kubectl: Path, admin: Path, node_id: str, status: str = "True") -> None:
    await poll_until(
        f"Node {node_id} Ready={status}",
        lambda: get(kubectl, admin, "node", node_id),
        lambda node: ready(node) == status,
        timeout=SETTLE if status == "True" else NOT_READY,
    )


def node_id(cluster: LocalCluster, node: LocalNode) -> str:
    found = cluster.node_id(node)
    assert found is not None
    return found


def kubelet_dir(node: LocalNode) -> Path:
    return node.datadir.plugin("kubernetes") / "kubelet"


def cgroup_dirs(cluster: LocalCluster, node: LocalNode) -> list[Path]:
    """The node's kubelet's cgroup root, in every hierarchy of this machine."""
    root = cgroup_root(node_id(cluster, node)).lstrip("/")
    return [hierarchy / root for hierarchy in cgroup_hierarchies()]


def listening(pid: int) -> set[tuple[ipaddress.IPv4Address, int]]:
    """The TCP addresses process ``pid`` listens on (IPv4: the nodes are on loopback)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # LISTEN, one of the process's
            host, port = fields[1].split(":")
            address = ipaddress.IPv4Address(bytes.fromhex(host)[::-1])
            found.add((address, int(port, 16)))
    return found


def kubelet_pid(node: LocalNode) -> int:
    return read_record(node.datadir.plugin("kubernetes") / "kubelet.process.json").pid


def pod_manifest(name: str, node: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "sleeper",
                        "image": POD_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["/bin/busybox", "sh", "-c", f"echo {GREETING}; sleep 3600"],
                    }
                ],
            },
        }
    )


async def apply(kubectl: Path, admin: Path, manifest: str) -> subprocess.CompletedProcess[bytes]:
    command = [str(kubectl), "--kubeconfig", str(admin), "apply", "-f", "-"]
    return await anyio.run_process(command, input=manifest.encode(), check=False)


def pod_name(index: int) -> str:
    return f"sleeper-{index}"


def running(pod: dict[str, Any]) -> bool:
    statuses = pod["status"].get("containerStatuses", [])
    return pod["status"].get("phase") == "Running" and all(
        "running" in status["state"] for status in statuses
    )


def restarts(pod: dict[str, Any]) -> int:
    return sum(status["restartCount"] for status in pod["status"].get("containerStatuses", []))


@pytest.fixture(scope="module")
def pods(cluster: LocalCluster, kubectl: Path, admin: Path) -> dict[int, dict[str, Any]]:
    """One pod on each node (bound to it by ``nodeName``), once every Node is Ready; each
    pod as it was first seen running."""

    async def start() -> dict[int, dict[str, Any]]:
        for local in cluster.nodes:
            await wait_ready(kubectl, admin, node_id(cluster, local))
        seen = {}
        for local in cluster.nodes:
            manifest = pod_manifest(pod_name(local.index), node_id(cluster, local))
            # Refused until the controller-manager has made the default service account.
            await poll_until(
                f"pod {pod_name(local.index)} created",
                functools.partial(apply, kubectl, admin, manifest),
                lambda result: result.returncode == 0,
                timeout=SETTLE,
            )
        for local in cluster.nodes:
            seen[local.index] = await poll_until(
                f"pod {pod_name(local.index)} running",
                functools.partial(get, kubectl, admin, "pod", pod_name(local.index)),
                running,
                timeout=SETTLE,
            )
        return seen

    return anyio.run(start)


async def test_two_kubelets_share_the_machine_each_ready_with_a_pod_in_its_own_cgroups(
    cluster: LocalCluster, kubectl: Path, admin: Path, pods: dict[int, dict[str, Any]]
) -> None:
    first, second = cluster.nodes
    # Node 2 holds no controller role: its kubelet found node 1's apiserver.
    listed = run_ctl(cluster.owner_directory, "nodes").stdout
    assert "kubernetes_controller" not in next(
        line for line in listed.splitlines() if node_id(cluster, second) in line
    )
    kubeconfig = json.loads((kubelet_dir(second) / "kubeconfig").read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{first.address}:6443"

    nodes = await get(kubectl, admin, "nodes")
    assert sorted(item["metadata"]["name"] for item in nodes["items"]) == sorted(
        node_id(cluster, local) for local in cluster.nodes
    )
    # the cluster's own network on this machine, as cluster up recorded it
    network = ipaddress.ip_network((cluster.directory / "cluster-network").read_text().strip())
    for local in cluster.nodes:
        pod = pods[local.index]
        assert pod["spec"]["nodeName"] == node_id(cluster, local)
        assert ipaddress.ip_address(pod["status"]["podIP"]) in network
        # The pod's cgroup is under its own node's kubelet's root, in every hierarchy,
        # and under no other's.
        uid = pod["metadata"]["uid"]
        config = json.loads((kubelet_dir(local) / "config.json").read_text())
        assert config["cgroupRoot"] == cgroup_root(node_id(cluster, local))
        for directory in cgroup_dirs(cluster, local):
            assert list(directory.glob(f"kubepods/*/pod{uid}")), directory
        other = second if local is first else first
        for directory in cgroup_dirs(cluster, other):
            assert not list(directory.glob(f"kubepods/*/pod{uid}")), directory
        # Every port of its kubelet is on the node's own address (the API 10250, healthz
        # 10248 on the node's loopback address, which is its own local host).
        ports = listening(kubelet_pid(local))
        assert {(local.address, 10250), (local.address, 10248)} <= ports
        assert {address for address, _ in ports} == {local.address}
    # Both keep running: neither kubelet removed or restarted the other's.
    for local in cluster.nodes:
        pod = await get(kubectl, admin, "pod", pod_name(local.index))
        assert running(pod)
        assert restarts(pod) == 0
        assert pod["metadata"]["uid"] == pods[local.index]["metadata"]["uid"]


def has_internal_ip(address: ipaddress.IPv4Address, node: dict[str, Any]) -> bool:
    wanted = {"type": "InternalIP", "address": str(address)}
    return wanted in node["status"].get("addresses", [])


async def test_on_loopback_each_node_has_its_internal_ip_and_kubectl_logs_works(
    cluster: LocalCluster, kubectl: Path, admin: Path, pods: dict[int, dict[str, Any]]
) -> None:
    """The kubelet refuses a loopback node IP; the worker sets the Node's address itself,
    so the apiserver reaches each kubelet (its logs, of a pod on either node)."""
    for local in cluster.nodes:
        await poll_until(
            f"node {local.index}'s InternalIP",
            functools.partial(get, kubectl, admin, "node", node_id(cluster, local)),
            functools.partial(has_internal_ip, local.address),
            timeout=SETTLE,
        )
        logs = await kube(kubectl, admin, "logs", pod_name(local.index))
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.strip() == GREETING


async def test_a_kubelet_may_change_its_own_node_and_no_other(
    cluster: LocalCluster, kubectl: Path, admin: Path, pods: dict[int, dict[str, Any]]
) -> None:
    first, second = cluster.nodes
    own, other = node_id(cluster, second), node_id(cluster, first)
    credentials = kubelet_dir(second) / "kubeconfig"

    whoami = await kube(kubectl, credentials, "auth", "whoami", "-o", "json")
    assert whoami.returncode == 0, whoami.stderr
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:node:{own}"
    assert "system:nodes" in user["groups"]

    allowed = await kube(kubectl, credentials, "annotate", "--overwrite", "node", own, "t/x=1")
    assert allowed.returncode == 0, allowed.stderr
    refused = await kube(kubectl, credentials, "annotate", "--overwrite", "node", other, "t/x=1")
    assert refused.returncode != 0
    assert "Forbidden" in refused.stderr, refused.stderr
    # NodeRestriction: even on its own Node, a kubelet may not set a restricted label.
    label = "node-restriction.kubernetes.io/pool=x"
    restricted = await kube(kubectl, credentials, "label", "--overwrite", "node", own, label)
    assert restricted.returncode != 0
    assert "is not allowed to modify labels" in restricted.stderr, restricted.stderr
    assert "t/x" not in (await get(kubectl, admin, "node", other))["metadata"].get(
        "annotations", {}
    )


async def test_removing_the_worker_role_leaves_nothing_and_adding_it_back_makes_it_ready(
    cluster: LocalCluster, kubectl: Path, admin: Path, pods: dict[int, dict[str, Any]]
) -> None:
    first, second = cluster.nodes
    removed = node_id(cluster, second)
    socket = node_runtime_dir(second.directory) / "kubernetes" / "containerd.sock"
    assert shim_pids(socket), "a pod runs on node 2: a shim of its containerd"

    result = run_ctl(cluster.owner_directory, "roles", "unset", removed, "kubernetes_worker")
    assert result.returncode == 0, result.stderr

    async def left() -> list[str]:
        shims = [f"shim {pid}" for pid in shim_pids(socket)]
        mounts = [f"mount {point}" for point in mounts_under([kubelet_dir(second) / "root"])]
        return shims + mounts + [str(d) for d in cgroup_dirs(cluster, second) if d.exists()]

    await poll_until("no shim, mount or cgroup of node 2 left", left, lambda found: not found)
    await wait_ready(kubectl, admin, removed, "Unknown")
    # Node 1's pod was not touched.
    kept = await get(kubectl, admin, "pod", pod_name(first.index))
    assert running(kept)
    assert restarts(kept) == 0
    assert all(directory.is_dir() for directory in cgroup_dirs(cluster, first))

    result = run_ctl(cluster.owner_directory, "roles", "set", removed, "kubernetes_worker")
    assert result.returncode == 0, result.stderr
    await wait_ready(kubectl, admin, removed)
    # Its pod is started again by the new kubelet, in its cgroups again.
    await poll_until(
        "node 2's pod running again",
        lambda: get(kubectl, admin, "pod", pod_name(second.index)),
        running,
        timeout=SETTLE,
    )
    assert all(directory.is_dir() for directory in cgroup_dirs(cluster, second))
