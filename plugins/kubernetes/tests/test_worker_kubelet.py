"""The kubelet worker in a node: gated on ``kubernetes_worker``, it waits for its inputs,
asks for the kubelet's certificates once, and runs a stand-in kubelet until it is healthy;
without a binary its child says the node is a container runtime only."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from roleserve_core import (
    CLUSTER_NODES,
    NETWORK,
    NODE_ID,
    ClusterNodes,
    KubernetesController,
    KubernetesWorker,
    NetworkStatus,
    NodeContext,
    NodeRoles,
    State,
    common_pb2,
    hookimpl,
)
from roleserve_core.testing import (
    NodeHarness,
    StartNode,
    node_record,
    poll_until,
    random_loopback,
    start_plugin_node,
)
from roleserve_kubernetes import (
    KUBERNETES_STATUS,
    POD_NETWORK,
    KubernetesStatus,
    PodNetwork,
    binaries,
)
from roleserve_kubernetes.certificates import KubeletCredentials
from roleserve_kubernetes.cgroups import cgroup_root
from roleserve_kubernetes.errors import SocketPathError
from roleserve_kubernetes.hooks import kubelet_worker
from roleserve_kubernetes.kubeletroot import is_bound, root_mount_point
from roleserve_kubernetes.layout import check_kubelet_root
from roleserve_kubernetes.leftovers import mounts_under
from roleserve_kubernetes.pki import KeyPair
from roleserve_kubernetes.plans import kubelet_root
from roleserve_kubernetes.testing import stand_in_kubelet, throwaway_pki
from roleserve_kubernetes.worker_kubelet import KubeletStartup

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="the worker mounts the kubelet's root directory: needs root"
    ),
]

DEEP = 150
"""Characters of the nodes' data directories: deeper than a kubelet socket allows."""

DN = "root.role.kubernetes_kubelet"
WORKER = NodeRoles(kubernetes_worker=KubernetesWorker())


class RecordingCertificates:
    """The kubelet's certificates: records each startup it is asked for."""

    def __init__(self, pki: dict[str, KeyPair]) -> None:
        self.pki = pki
        self.calls: list[KubeletStartup] = []

    async def __call__(self, startup: KubeletStartup) -> tuple[KeyPair, KeyPair]:
        self.calls.append(startup)
        return self.pki["admin"], self.pki["apiserver"]


async def kubelet_node(
    node: StartNode, tmp_path: Path, certificates: Any, **config: str
) -> NodeHarness:
    """A node running the kubelet worker alone, with the test's certificates and cgroups."""

    def values() -> list[Any]:
        return [KUBERNETES_STATUS, POD_NETWORK]

    def settings() -> list[Any]:
        return list(binaries.SETTINGS)

    def workers(node: NodeContext) -> list[Any]:
        return [kubelet_worker(node, certificates=certificates, hierarchies=hierarchies)]

    def hierarchies() -> list[Path]:
        return [tmp_path / "cgroup" / "cpu", tmp_path / "cgroup" / "cpuset"]

    for hierarchy in hierarchies():
        hierarchy.mkdir(parents=True)
    (tmp_path / "cgroup" / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    kubernetes = SimpleNamespace(
        roleserve_values=hookimpl(values),
        roleserve_settings=hookimpl(settings),
        roleserve_workers=hookimpl(workers),
    )
    # No cluster_nodes: the test's to set.
    plugins = {"kubernetes": kubernetes}
    return await start_plugin_node(node, tmp_path / "node", plugins, config={"kubernetes": config})


@pytest.fixture
def deep_dir(tmp_path: Path) -> Path:
    """A data directory of 150 characters, in pytest's own: the kubelet binds a socket
    about 60 characters below its node's, which is why its root directory is named by a
    short path in the runtime directory (``kubeletroot``)."""
    directory = tmp_path / ("d" * (DEEP - len(str(tmp_path)) - 1))
    directory.mkdir()
    return directory


async def test_waits_for_its_inputs_then_runs_the_kubelet(
    node: Callable[..., Awaitable[NodeHarness]], deep_dir: Path
) -> None:
    tmp_path = deep_dir
    address = random_loopback()
    pki = throwaway_pki([address])
    certificates = RecordingCertificates(pki)
    kubelet = stand_in_kubelet(tmp_path / "kubelet")
    harness = await kubelet_node(node, tmp_path, certificates, kubelet=str(kubelet))
    harness.set_roles(WORKER)
    await harness.wait_status(DN, lambda s: s.note == "waiting for the node's ID")
    harness.set(NODE_ID, "node-0123")
    harness.set(NETWORK, NetworkStatus(address))
    prefix = ipaddress.ip_network("10.192.7.0/24")
    harness.set(POD_NETWORK, PodNetwork((prefix,)), by="kubernetes")
    await harness.wait_status(DN, lambda s: s.note.startswith("waiting for a kube-apiserver"))
    ca = pki["ca"].certificate_pem
    assert ca is not None
    apiserver = f"https://{address}:6443"
    status = KubernetesStatus(apiserver, ca, True, ("kube-apiserver",), ())
    harness.set(KUBERNETES_STATUS, status, by="kubernetes")

    child = await harness.wait_state(f"{DN}.kubelet")
    assert child.note.startswith("kubelet ready, pid ")
    assert certificates.calls == [KubeletStartup("node-0123", address, prefix, apiserver, ca)]
    context = harness.runtime.context("kubernetes")
    config = context.data_dir / "kubelet" / "config.json"
    assert '"podCIDR": "10.192.7.0/24"' in config.read_text()
    # Its root directory is on disk in the data directory, named by a short path (the
    # socket it binds there fits), mounted in the runtime directory.
    on_disk = kubelet_root(context.data_dir / "kubelet")
    assert (on_disk / "stand-in-was-here").exists()
    assert (on_disk / "pod-resources" / "kubelet.sock").is_socket()
    assert is_bound(on_disk, root_mount_point(context.runtime_dir))
    # Its own cgroup root, made in every hierarchy before it started; a new cpuset gets
    # its parent's CPUs.
    root = json.loads(config.read_text())["cgroupRoot"]
    assert root == cgroup_root("node-0123")
    made = [tmp_path / "cgroup" / kind / root.lstrip("/") for kind in ("cpu", "cpuset")]
    assert all(directory.is_dir() for directory in made)
    assert (made[1] / "cpuset.cpus").read_text() == "0-1\n"

    # Readiness changes nothing the kubelet starts from: no restart.
    harness.set(KUBERNETES_STATUS, KubernetesStatus(apiserver, ca, False, (), ()), by="kubernetes")
    (made[1] / "cpuset.cpus").unlink()  # a cgroup's files go with it; a directory's do not
    harness.set_roles(NodeRoles())  # the role goes: the core cancels the worker
    await harness.wait_status(DN, lambda s: s.state is not State.HEALTHY)
    assert len(certificates.calls) == 1
    await poll_until("the cgroup root removed", lambda: _exists(made), lambda left: not left)
    assert mounts_under([root_mount_point(context.runtime_dir)]) == []
    assert (on_disk / "stand-in-was-here").exists()


async def _exists(paths: list[Path]) -> list[Path]:
    return [path for path in paths if path.exists()]


class CuratorCredentials:
    """The kubelet's credentials as the curator gives them: with the Kubernetes CA."""

    def __init__(self, pki: dict[str, KeyPair]) -> None:
        self.pki = pki
        self.calls: list[KubeletStartup] = []

    async def __call__(self, startup: KubeletStartup) -> KubeletCredentials:
        self.calls.append(startup)
        ca = self.pki["ca"].certificate_pem
        assert ca is not None
        return KubeletCredentials(self.pki["admin"], self.pki["apiserver"], ca)


async def test_a_worker_only_node_takes_a_controller_s_apiserver_of_the_cluster(
    node: Callable[..., Awaitable[NodeHarness]], deep_dir: Path
) -> None:
    """No kube-apiserver of its own: the first controller of ``cluster_nodes`` (by ID,
    UP, with an address), and the CA that came with the certificates."""
    address = random_loopback()
    pki = throwaway_pki([address])
    certificates = CuratorCredentials(pki)
    kubelet = stand_in_kubelet(deep_dir / "kubelet")
    harness = await kubelet_node(node, deep_dir, certificates, kubelet=str(kubelet))
    harness.set_roles(WORKER)
    harness.set(NODE_ID, "node-4")
    harness.set(NETWORK, NetworkStatus(address))
    prefix = ipaddress.ip_network("10.192.7.0/24")
    harness.set(POD_NETWORK, PodNetwork((prefix,)), by="kubernetes")
    controller = NodeRoles(kubernetes_controller=KubernetesController())
    records = {
        "node-4": node_record("node-4", str(address), roles=WORKER),
        "node-3": node_record(
            "node-3", "127.0.0.13", roles=controller, state=common_pb2.NODE_STATE_NEW
        ),
        "node-2": node_record("node-2", "", roles=controller),
    }
    harness.set(CLUSTER_NODES, ClusterNodes(records, backlogged=True))
    await harness.wait_status(
        DN, lambda s: s.note.endswith("no node of the cluster holds kubernetes_controller")
    )
    records["node-9"] = node_record("node-9", "127.0.0.19", roles=controller)
    records["node-1"] = node_record("node-1", "127.0.0.11", roles=controller)
    harness.set(CLUSTER_NODES, ClusterNodes(records, backlogged=True))

    child = await harness.wait_state(f"{DN}.kubelet")
    assert child.note.startswith("kubelet ready, pid ")
    assert certificates.calls == [
        KubeletStartup("node-4", address, prefix, "https://127.0.0.11:6443")
    ]
    directory = harness.runtime.context("kubernetes").data_dir / "kubelet"
    config = json.loads((directory / "kubeconfig").read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.11:6443"
    ca = base64.b64decode(cluster["certificate-authority-data"])
    assert ca == pki["ca"].certificate_pem
    assert (directory / "ca.pem").read_bytes() == ca

    # That controller leaves: the kubelet starts over on the next one, and its cgroup
    # root stays (its pods run on under the next kubelet).
    made = deep_dir / "cgroup" / "cpu" / cgroup_root("node-4").lstrip("/")
    assert made.is_dir()
    del records["node-1"]
    harness.set(CLUSTER_NODES, ClusterNodes(records, backlogged=True))
    await poll_until(
        "the kubelet on node-9's apiserver",
        lambda: _server(directory / "kubeconfig"),
        lambda server: server == "https://127.0.0.19:6443",
    )
    await harness.wait_state(f"{DN}.kubelet")
    assert made.is_dir()
    assert [call.apiserver for call in certificates.calls] == [
        "https://127.0.0.11:6443",
        "https://127.0.0.19:6443",
    ]


async def _server(kubeconfig: Path) -> str:
    text = await anyio.Path(kubeconfig).read_text()
    return str(json.loads(text)["clusters"][0]["cluster"]["server"])


async def test_a_controller_node_waits_for_its_own_apiserver(
    node: Callable[..., Awaitable[NodeHarness]], deep_dir: Path
) -> None:
    certificates = CuratorCredentials(throwaway_pki())
    kubelet = stand_in_kubelet(deep_dir / "kubelet")
    harness = await kubelet_node(node, deep_dir, certificates, kubelet=str(kubelet))
    harness.set_roles(WORKER)
    harness.set(NODE_ID, "node-1")
    harness.set(NETWORK, NetworkStatus(random_loopback()))
    prefix = ipaddress.ip_network("10.192.7.0/24")
    harness.set(POD_NETWORK, PodNetwork((prefix,)), by="kubernetes")
    both = NodeRoles(
        kubernetes_controller=KubernetesController(), kubernetes_worker=KubernetesWorker()
    )
    records = {
        "node-1": node_record("node-1", "127.0.0.11", roles=both),
        "node-0": node_record("node-0", "127.0.0.10", roles=both),
    }
    harness.set(CLUSTER_NODES, ClusterNodes(records, backlogged=True))
    await harness.wait_status(DN, lambda s: s.note.endswith("this node's own (kubernetes_status)"))
    assert certificates.calls == []


async def test_without_a_kubelet_the_node_is_a_container_runtime_only(
    node: Callable[..., Awaitable[NodeHarness]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no kube binary on PATH, whatever the machine
    certificates = RecordingCertificates({})
    harness = await kubelet_node(
        node, tmp_path, certificates, kube_binaries_dir=str(tmp_path / "none")
    )
    harness.set_roles(WORKER)
    note = "kubelet not found: container runtime only"
    child = await harness.wait_status(f"{DN}.kubelet", lambda s: s.note == note)
    assert (child.state, child.failures) == (State.NEW, 0)  # not running: not HEALTHY
    assert certificates.calls == []


def test_a_runtime_directory_too_deep_for_the_kubelet_s_socket_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """The kubelet's root is named in the runtime directory, short under /run/roleserve;
    only a runtime directory of another user's, under a deep $XDG_RUNTIME_DIR, is too
    deep: refused in one line naming the variable, not the kubelet's own exit."""
    runtime = tmp_path / ("d" * (100 - len(str(tmp_path)) - 1)) / "kubernetes"
    root = root_mount_point(runtime)
    with pytest.raises(SocketPathError) as refused:
        check_kubelet_root(root)
    socket = root / "pod-resources" / "kubelet.sock"
    assert str(refused.value) == (
        f"kubelet's socket {socket} is {len(str(socket))} bytes, more than kubelet takes"
        " (107); set XDG_RUNTIME_DIR to a shorter directory (the node's sockets go under it)"
    )
    check_kubelet_root(root_mount_point(Path("/run/roleserve/0123456789ab/kubernetes")))
