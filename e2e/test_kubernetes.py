"""Kubernetes for real, as an operator sees it: ``roleserve cluster up --netns`` with the
kube binaries ``./dev kube-binaries`` built (from the pinned build's cache), and the
kubectl of the same build with the admin kubeconfig ``roleserve ctl kubeconfig`` writes.

Three nodes, each a consensus member, a Kubernetes controller and a worker: every node's
Node is Ready, and the kubectl command ``cluster up`` prints lists them; one busybox pod
per node (``roleserve.local/busybox:latest``) runs with an address from its node's pod
prefix (the upper half of its curator-allocated prefix); a pod pings a pod of another node
through the WireGuard mesh; the worker role removed from one node leaves none of its
containers, shims, mounts or cgroups, and given back, its Node is Ready again and its pod
runs again; one controller's role removed, the API answers through the other two contexts
of the kubeconfig, and given back, its apiserver is ready again. Then node 3,
decommissioned, loses its Node; and ``cluster down``, with pods running, leaves no
process, mount or cgroup of the cluster.

One cluster (``kube``) serves the module: three control planes and three kubelets can
take minutes to start on two loaded cores, so every wait on the cluster's state allows
``STARTUP`` seconds. Every test but the last two leaves it as it found it (every role in
place, every Node Ready, one pod per node Running). Without the built binaries the module
skips (fails under ``ROLESERVE_REQUIRE_REAL=1``), naming ``./dev kube-binaries``.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import secrets
import shlex
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from roleserve_core import node_runtime_dir
from roleserve_core.testing import require_real, run_ctl
from roleserve_kubernetes.cgroups import cgroup_hierarchies, cgroup_root
from roleserve_kubernetes.image import BUSYBOX_IMAGE
from roleserve_kubernetes.kubeletroot import root_mount_point
from roleserve_kubernetes.leftovers import descendants, mounts_under, shim_pids, unmount
from roleserve_kubernetes.testing import require_kube_binaries

from .netns_kit import (
    TIMEOUT,
    MeshNode,
    NetnsCluster,
    mesh_nodes,
    netns_cluster_up,
    roleserve,
    run,
    wait_for,
)

STARTUP = 300.0
"""Seconds a wait on Kubernetes may take: three control planes and kubelets starting on a
loaded machine take minutes."""

pytestmark = pytest.mark.timeout(4 * STARTUP)
"""Each test, the first with the cluster's start: ``cluster up`` (at most ``2 * STARTUP``,
the kube components' start among it), then a wait or two."""

KUBE_CONFIG = """\
[plugins.controlplane]
lease_ttl = 3
"""
"""Each node's roleserve.toml: the e2e modules' short election lease, and, unlike
``E2E_CONFIG``, no ``kube_binaries_dir``, so the nodes find the built binaries."""

SHELL = ("sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait")
"""What a pod runs (its ``$0`` after it): a shell that waits, and ends at SIGTERM."""

LABEL = "roleserve-e2e=busybox"
"""The label of this module's pods."""

LIST_NODES = "list Kubernetes' nodes with: "
"""How ``cluster up`` introduces the kubectl command it prints."""


@dataclass(frozen=True)
class Kube:
    """The cluster, and kubectl with the owner's admin kubeconfig."""

    cluster: NetnsCluster
    kubectl: Path
    kubeconfig: Path

    context: str | None = None
    """The kubeconfig's context to use; None: its current one."""

    def __call__(
        self, *args: str, stdin: str | None = None, server: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """kubectl ``args``; at ``server`` instead of the context's, if given."""
        where = ["--server", server] if server else []
        where += ["--context", self.context] if self.context else []
        return subprocess.run(
            [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *where, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def json(self, *args: str) -> Any:
        """kubectl ``args`` ``-o json``, parsed; a failure raises (a wait takes it as not
        yet)."""
        done = self(*args, "-o", "json")
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip())
        return json.loads(done.stdout)

    def data_dir(self, node: MeshNode) -> Path:
        return self.cluster.data_dir(node.index)

    def node_socket(self, node: MeshNode) -> Path:
        """The node's containerd socket, as its shims name it."""
        return self.cluster.containerd_socket(node.index)

    def leftovers(self, node: MeshNode) -> list[str]:
        """What is left on the machine of ``node``'s worker: its shims, the cgroup root of
        its kubelet in any hierarchy, mounts under its kubelet's root directory."""
        kubelet_root = self.data_dir(node) / "plugins" / "kubernetes" / "kubelet" / "root"
        named = root_mount_point(node_runtime_dir(self.data_dir(node)) / "kubernetes")
        cgroups = [
            hierarchy / cgroup_root(node.id).lstrip("/") for hierarchy in cgroup_hierarchies()
        ]
        return [
            *(f"shim {pid}" for pid in shim_pids(self.node_socket(node))),
            *(f"cgroup {path}" for path in cgroups if path.exists()),
            *(f"mount {point}" for point in mounts_under([kubelet_root, named])),
        ]


KUBE_RUNNABLES = ("apiserver", "controller_manager", "scheduler", "containerd", "kubelet")
"""The runnables ``explained`` shows."""


@contextmanager
def explained(kube: Kube) -> Iterator[None]:
    """A wait that times out says, too, what each node's Kubernetes runnables are doing
    (their lines of ``ctl tree``): which component is not up, and its last error."""
    try:
        yield
    except TimeoutError as timeout:
        lines = [str(timeout)]
        for index in (1, 2, 3):
            tree = run_ctl(
                kube.cluster.credentials, "tree", f"n{index}", timeout=TIMEOUT
            ).stdout.splitlines()
            lines += [f"n{index}: {line.lstrip('│├└─ ')[:400]}" for line in tree
                      if line.lstrip("│├└─ ").startswith(KUBE_RUNNABLES)]  # fmt: skip
        raise TimeoutError("\n".join(lines)) from None


def runtime_missing() -> str:
    """The first of containerd, runc and ctr not on PATH, or ``""``."""
    return next((tool for tool in ("containerd", "runc", "ctr") if not shutil.which(tool)), "")


@pytest.fixture(scope="module")
def kube(components: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """Three nodes made by ``cluster up --netns``, once an apiserver is ready (``ctl
    kubeconfig`` writes a kubeconfig only then).

    The cluster's directory is in pytest's own temporary directory, as deep as a user's
    checkout may be: each kubelet binds a socket about 60 characters below its root
    directory, which the worker names by a short path (``kubeletroot``). Removed after
    the cluster is down, with whatever mount a failed test left under it.
    """
    bin_dir = require_kube_binaries()
    missing = runtime_missing()
    require_real(
        "containerd, runc and ctr", not missing, f"missing: {missing}; .ci/system-packages"
    )
    directory = tmp_path_factory.mktemp("kubernetes-on-roleserve-in-a-deep-directory")
    try:
        with netns_cluster_up(directory / "c", KUBE_CONFIG, timeout=2 * STARTUP) as cluster:
            kubeconfig = directory / "kubeconfig"
            wait_for(
                "a ready apiserver (ctl kubeconfig)",
                lambda: run_ctl(
                    cluster.credentials,
                    "kubeconfig",
                    "--out",
                    str(kubeconfig),
                    "--force",
                    timeout=TIMEOUT,
                ),
                lambda done: done.returncode == 0,
                timeout=STARTUP,
            )
            yield Kube(cluster, bin_dir / "kubectl", kubeconfig)
    finally:
        for point in mounts_under([directory]):
            unmount(point)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def workers(kube: Kube) -> list[MeshNode]:
    """The three nodes, once each has its prefix and has announced it on the mesh."""
    return wait_for(
        "3 UP nodes with a prefix and a key",
        lambda: mesh_nodes(kube.cluster),
        lambda nodes: len(nodes) == 3,
        timeout=STARTUP,
    )


def ready_nodes(kube: Kube) -> dict[str, bool]:
    """Each Node's name and whether its Ready condition is True."""
    return {
        item["metadata"]["name"]: any(
            condition["type"] == "Ready" and condition["status"] == "True"
            for condition in item["status"].get("conditions", [])
        )
        for item in kube.json("get", "nodes")["items"]
    }


def wait_until_ready(kube: Kube, workers: list[MeshNode]) -> None:
    """Until there is a Ready Node for each of ``workers`` and no other Node."""
    wanted = {node.id: True for node in workers}
    with explained(kube):
        wait_for("every node's Node Ready", lambda: ready_nodes(kube), wanted.__eq__, STARTUP)


def test_every_node_is_ready(kube: Kube, workers: list[MeshNode]) -> None:
    """Each kubelet registered a Node named after its roleserve node ID, and it is Ready."""
    wait_until_ready(kube, workers)


def test_cluster_up_says_how_to_list_the_nodes(kube: Kube, workers: list[MeshNode]) -> None:
    """``cluster up`` waited for them, and printed the one command that lists them, with
    the built kubectl and the kubeconfig it wrote in the cluster's directory."""
    [command] = [
        line.removeprefix(LIST_NODES)
        for line in kube.cluster.made.splitlines()
        if line.startswith(LIST_NODES)
    ]
    words = shlex.split(command)
    assert words == [
        str(kube.kubectl), "--kubeconfig", str(kube.cluster.directory / "kubeconfig"),
        "get", "nodes",
    ]  # fmt: skip
    listed = subprocess.run(words, capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[:2] for line in listed.stdout.splitlines()[1:]]
    assert sorted(rows) == sorted([node.id, "Ready"] for node in workers)


# -- pods ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    name: str
    node: MeshNode
    marker: str
    """The ``$0`` of the pod's shell: finds its process on the host (``pgrep -f``)."""

    def manifest(self) -> str:
        """A pod on ``node`` (by its hostname label) running a busybox shell that waits."""
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": self.name, "labels": dict([LABEL.split("=")])},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": self.node.id},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "busybox",
                            "image": BUSYBOX_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": [*SHELL, self.marker],
                        }
                    ],
                },
            }
        )


def running_pod(kube: Kube, pod: Pod) -> dict[str, Any] | None:
    """The pod's status once it runs, with an address; else None."""
    status: dict[str, Any] = kube.json("get", "pod", pod.name)["status"]
    return status if status.get("phase") == "Running" and status.get("podIP") else None


def wait_until_running(kube: Kube, pod: Pod) -> dict[str, Any]:
    with explained(kube):
        status: dict[str, Any] | None = wait_for(
            f"pod {pod.name} on node {pod.node.index} Running",
            lambda: running_pod(kube, pod),
            timeout=STARTUP,
        )
    assert status is not None
    return status


def marker_pids(pod: Pod) -> list[int]:
    """The processes of ``pod``'s container, seen from the host."""
    found = subprocess.run(
        ["pgrep", "-f", pod.marker], capture_output=True, text=True, timeout=30, check=False
    )
    return [int(pid) for pid in found.stdout.split()]


@pytest.fixture(scope="module")
def pods(kube: Kube, workers: list[MeshNode]) -> Iterator[list[Pod]]:
    """One busybox pod per node, once every Node is Ready; deleted after the module's
    tests."""
    wait_until_ready(kube, workers)
    made = [
        Pod(f"busybox-{node.index}", node, f"roleserve-e2e-{secrets.token_hex(4)}")
        for node in workers
    ]
    try:
        for pod in made:
            # Refused until the controller-manager has made the default service account.
            wait_for(
                f"pod {pod.name} created",
                functools.partial(kube, "apply", "-f", "-", stdin=pod.manifest()),
                lambda done: done.returncode == 0,
                timeout=STARTUP,
            )
        yield made
    finally:
        kube("delete", "pods", "-l", LABEL, "--wait", "--timeout=120s")


def pod_ip(kube: Kube, pod: Pod) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(wait_until_running(kube, pod)["podIP"])


def test_one_busybox_pod_per_node_with_an_address_of_its_prefix(
    kube: Kube, pods: list[Pod]
) -> None:
    """Each pod runs on the node it was meant for, with an address of that node's pod
    network, and its shell runs under that node's containerd (a shim of its socket)."""
    for pod in pods:
        assert pod_ip(kube, pod) in pod.node.pod_network, pod
        spec = kube.json("get", "pod", pod.name)["spec"]
        assert spec["nodeName"] == pod.node.id
        [shell] = marker_pids(pod)
        assert shell in descendants(shim_pids(kube.node_socket(pod.node))), pod


def test_a_pod_pings_the_pods_of_the_other_nodes_over_the_mesh(kube: Kube, pods: list[Pod]) -> None:
    """From each pod to the next node's: the route the pod's node takes to it is its
    WireGuard interface."""
    addresses = {pod.name: pod_ip(kube, pod) for pod in pods}
    for pod, other in zip(pods, [*pods[1:], pods[0]], strict=True):
        target = str(addresses[other.name])
        command = ("exec", pod.name, "--", "ping", "-c", "1", "-W", "2", target)
        pinged = wait_for(
            f"{pod.name} pings {other.name} at {target}",
            functools.partial(kube, *command),
            lambda done: done.returncode == 0,
            timeout=60,
        )
        assert "1 packets received" in pinged.stdout, pinged.stdout
        route = run("ip", "-n", pod.node.namespace, "route", "get", target)
        assert f" dev {pod.node.interface} " in route, route


# -- Services ---------------------------------------------------------------------------

WEB = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {roleserve-e2e: web}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule,
         labelSelector: {matchLabels: {app: web}}}
      containers:
      - name: web
        image: BUSYBOX_IMAGE
        imagePullPolicy: Never
        command: [sh, -c, "mkdir -p /w && hostname > /w/index.html && exec httpd -f -p 80 -h /w"]
---
apiVersion: v1
kind: Service
metadata: {name: web, labels: {roleserve-e2e: web}}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: web-nodeport, labels: {roleserve-e2e: web}}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80}]
""".replace("BUSYBOX_IMAGE", BUSYBOX_IMAGE)
"""Three web servers (busybox httpd), one per node, each answering its pod's name; a
ClusterIP Service and a NodePort Service in front of them."""


@pytest.fixture(scope="module")
def web(kube: Kube, pods: list[Pod]) -> Iterator[set[str]]:
    """The web Deployment and its Services, once its three pods run: their names."""
    wait_for(
        "the web Deployment and Services applied",
        functools.partial(kube, "apply", "-f", "-", stdin=WEB),
        lambda done: done.returncode == 0,
        timeout=STARTUP,
    )
    try:
        with explained(kube):
            names = wait_for(
                "3 web pods Running",
                lambda: {
                    item["metadata"]["name"]
                    for item in kube.json("get", "pods", "-l", "app=web")["items"]
                    if item["status"].get("phase") == "Running"
                },
                lambda running: len(running) == 3,
                timeout=STARTUP,
            )
        yield names
    finally:
        kube("delete", "deployment,service", "-l", "roleserve-e2e=web", "--wait", "--timeout=120s")


def answers(kube: Kube, pod: Pod, url: str, tries: int = 12) -> list[str]:
    """What ``url`` answers ``pod``, ``tries`` times (busybox's wget; a try that times out
    answers nothing)."""
    script = f"for i in $(seq {tries}); do timeout 3 wget -q -O - {url}; echo; done"
    done = kube("exec", pod.name, "--", "sh", "-c", script)
    return [line for line in done.stdout.splitlines() if line]


def test_a_service_s_cluster_ip_reaches_its_pods_from_pods_on_every_node(
    kube: Kube, pods: list[Pod], web: set[str]
) -> None:
    """kube-proxy on every node: from a pod on each node, the Service's ClusterIP answers,
    from more than one of its pods (on other nodes, over the mesh)."""
    address = kube.json("get", "service", "web")["spec"]["clusterIP"]
    for pod in pods:
        seen = wait_for(
            f"{address} answered from {pod.name} by more than one pod",
            lambda pod=pod: answers(kube, pod, f"http://{address}/"),  # type: ignore[misc]
            lambda got: len(set(got)) > 1 and set(got) <= web,
            timeout=120,
        )
        assert set(seen) <= web, seen


def test_a_node_port_answers_from_the_host_at_every_node_s_address(
    kube: Kube, workers: list[MeshNode], web: set[str]
) -> None:
    """``--netns``: each node's address, from the host, at the Service's NodePort."""
    port = kube.json("get", "service", "web-nodeport")["spec"]["ports"][0]["nodePort"]
    for node in workers:
        address = node.endpoint.rsplit(":", 1)[0]  # its own, on the host's bridge
        url = f"http://{address}:{port}/"
        name = wait_for(f"{url} answered from the host", lambda url=url: _get(url), timeout=120)
        assert name in web, name


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as answer:
        return str(answer.read().decode().strip())


# -- roles move ------------------------------------------------------------------------


def set_role(kube: Kube, node: MeshNode, action: str, role: str) -> None:
    done = run_ctl(kube.cluster.credentials, "roles", action, node.id, role, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr


def lease_renewed(kube: Kube, node: MeshNode) -> datetime:
    """When the node's kubelet last renewed its Lease (its heartbeat)."""
    lease = kube.json("get", "lease", "-n", "kube-node-lease", node.id)
    return datetime.fromisoformat(lease["spec"]["renewTime"])


def test_the_worker_role_removed_leaves_no_container_and_given_back_the_node_is_ready(
    kube: Kube, workers: list[MeshNode], pods: list[Pod]
) -> None:
    """Node 3 loses kubernetes_worker: no shim of its containerd and no process of its pod
    is left (the other nodes' pods run on). Given back, its kubelet heartbeats again, its
    Node is Ready and its pod runs again."""
    *others, pod = pods
    node = pod.node
    socket = kube.node_socket(node)
    wait_until_running(kube, pod)
    assert shim_pids(socket), "no shim of the pod's node to remove"
    assert marker_pids(pod), "no container to remove"
    set_role(kube, node, "unset", "kubernetes_worker")
    try:
        wait_for(
            f"no shim and no container left of node {node.index}",
            lambda: (shim_pids(socket), marker_pids(pod)),
            lambda left: left == ([], []),
            timeout=120,
        )
        assert all(marker_pids(other) for other in others)
        wait_for(f"nothing left of node {node.index}'s worker", lambda: kube.leftovers(node),
                 lambda left: not left, timeout=120)  # fmt: skip
    finally:
        given_back = datetime.now().astimezone()
        set_role(kube, node, "set", "kubernetes_worker")
    wait_for(
        f"node {node.index}'s kubelet's heartbeat after the role came back",
        lambda: lease_renewed(kube, node),
        lambda renewed: renewed > given_back,
        timeout=STARTUP,
    )
    wait_until_ready(kube, workers)
    wait_until_running(kube, pod)
    wait_for(f"{pod.name}'s shell again", lambda: marker_pids(pod), timeout=STARTUP)


def contexts(kube: Kube) -> dict[str, str]:
    """The kubeconfig's contexts and the server of each, the current one first."""
    config = json.loads(kube("config", "view", "-o", "json").stdout)
    servers = {entry["name"]: entry["cluster"]["server"] for entry in config["clusters"]}
    named = {entry["name"]: servers[entry["context"]["cluster"]] for entry in config["contexts"]}
    current = config["current-context"]
    return {current: named.pop(current), **named}


def kubeconfig_of(kube: Kube, name: str, controllers: int) -> Kube:
    """kubectl with a new kubeconfig (``ctl kubeconfig``), once it names ``controllers``
    ready apiservers."""
    made = replace(kube, kubeconfig=kube.kubeconfig.with_name(name))
    written = ("kubeconfig", "--out", str(made.kubeconfig), "--force")
    wait_for(
        f"a kubeconfig naming {controllers} ready apiservers",
        lambda: (run_ctl(kube.cluster.credentials, *written, timeout=TIMEOUT), contexts(made)),
        lambda seen: seen[0].returncode == 0 and len(seen[1]) == controllers,
        timeout=STARTUP,
    )  # fmt: skip
    return made


def apiserver_ready(kube: Kube, server: str) -> bool:
    """Whether the apiserver at ``server`` says it is ready (``/readyz``)."""
    return kube("get", "--raw", "/readyz", server=server).stdout == "ok"


def test_one_controller_removed_the_api_answers_through_the_others(
    kube: Kube, workers: list[MeshNode]
) -> None:
    """A kubeconfig names the three apiservers, a context each. The controller of its
    current context loses kubernetes_controller: its apiserver stops, and through each of
    the other two contexts the API answers, listing every Node; a new kubeconfig names
    those two alone. Given back, its apiserver is ready again."""
    every = kubeconfig_of(kube, "every", 3)
    (_current, server), *others = contexts(every).items()
    [node] = [
        node
        for node in workers
        if str(kube.cluster.plan.address(node.index)) == urlsplit(server).hostname
    ]
    set_role(kube, node, "unset", "kubernetes_controller")
    try:
        wait_for(
            f"node {node.index}'s apiserver gone",
            lambda: apiserver_ready(every, server),
            lambda ready: not ready,
            timeout=120,
        )
        for context, _server in others:
            through = replace(every, context=context)
            assert set(ready_nodes(through)) == {worker.id for worker in workers}, context
        remaining = kubeconfig_of(kube, "remaining", 2)
        assert set(contexts(remaining).values()) == {other for _context, other in others}
    finally:
        set_role(kube, node, "set", "kubernetes_controller")
    wait_for(
        f"node {node.index}'s apiserver ready again",
        lambda: apiserver_ready(every, server),
        timeout=STARTUP,
    )
    wait_until_ready(kube, workers)


def test_a_decommissioned_node_s_node_is_deleted(kube: Kube, workers: list[MeshNode]) -> None:
    """Node 3 loses its controller and consensus roles and is decommissioned (as
    ``docs/ctl.md`` says): its Node goes from the API; the other two stay Ready. Next to
    last: node 3 never comes back."""
    *remaining, node = workers
    for role in ("kubernetes_controller", "consensus_member"):
        set_role(kube, node, "unset", role)
    two = kubeconfig_of(kube, "two", 2)
    gone = run_ctl(kube.cluster.credentials, "decommission", node.id, "--yes", timeout=TIMEOUT)
    assert gone.returncode == 0, gone.stderr
    wanted = {other.id: True for other in remaining}
    with explained(kube):
        wait_for(f"node {node.index}'s Node deleted", lambda: ready_nodes(two), wanted.__eq__,
                 timeout=STARTUP)  # fmt: skip


# -- last ------------------------------------------------------------------------------


def cluster_processes(kube: Kube, workers: list[MeshNode], pods: list[Pod]) -> list[str]:
    """The processes of the cluster: any naming its directory or a node's runtime
    directory (nodes, etcd, kube components, containerd, shims), and the pods' shells."""
    names = [str(kube.cluster.directory), *(str(node_runtime_dir(kube.data_dir(node)))
                                             for node in workers)]  # fmt: skip
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
        except OSError:
            continue
        if proc.name.isdigit() and any(name in cmdline for name in names):
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found + [f"{pod.name}: {pid}" for pod in pods for pid in marker_pids(pod)]


def test_down_leaves_no_process_mount_or_cgroup(
    kube: Kube, workers: list[MeshNode], pods: list[Pod]
) -> None:
    """Last (it takes the cluster down, pods running): no process of the cluster, no
    mount under its directory, no cgroup root of its kubelets is left."""
    assert cluster_processes(kube, workers, pods)
    down = roleserve("cluster", "down", "--dir", str(kube.cluster.directory))
    assert down.returncode == 0, down.stderr
    left = cluster_processes(kube, workers, pods) + [
        f"mount {point}" for point in mounts_under([kube.cluster.directory])
    ]
    left += [item for node in workers for item in kube.leftovers(node)]
    left += [  # removed once nothing is mounted there (the kubelet's root directory)
        f"runtime directory {path}"
        for path in (node_runtime_dir(kube.data_dir(node)) for node in workers)
        if path.exists()
    ]
    assert not left, "\n".join(left)
