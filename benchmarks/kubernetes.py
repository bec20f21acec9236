"""kubernetes: how long the worker takes to give a node a container runtime, and a pod.

Run (root, containerd, runc, ctr, containernetworking-plugins, busybox-static;
``bash .ci/system-packages``): ``./dev sync && .venv/bin/python benchmarks/kubernetes.py
[--rounds 10]``.

containerd runs in a network namespace this program makes (the pods' bridge and their
10.192.7.128/25 addresses stay in it), removed at the end with everything in it; the data
directory is a temporary one. Each figure is printed next to a baseline measured in the
same run, and the ratio of the two:

(k1) the role set → containerd's CRI ready: from setting ``kubernetes_worker`` on a node
     running the plugin (the role unset before each round, untimed, waiting until the
     worker has stopped and cleaned up) until the runnable ``containerd`` is HEALTHY
     (CRI Status says RuntimeReady; the sandbox image already imported by the warm-up
     round, as on every start but a node's first). Baseline: ``containerd --config`` of the
     same configuration file started by hand (``nsenter --net``, as the worker does), until
     the same CRI Status call over its socket says ready; stopped after each round.
(k2) a pod: RunPodSandbox, CreateContainer, StartContainer of ``/bin/true`` through the
     plugin's ``CriClient`` until ContainerStatus says it exited (polled every 5 ms); the
     sandbox removed after each round, untimed. Baseline: ``ctr -n k8s.io run --rm`` of
     the same image and command on the same containerd (no sandbox, no CNI: ctr gives the
     container a namespace with a loopback only). Both include process start and exit.

With ``--cluster N`` (root, the kube binaries built: ``./dev kube-binaries``), instead, a
local cluster of N nodes on loopback (``roleserve cluster up``, real node processes, every
node a worker, three controllers; its directory under /tmp, its addresses 127.X.Y.11…):

(k3) ``cluster up --detach`` of a new cluster → every Node Ready: ``up`` says the cluster
     is up only once the apiserver reports every Node Ready (its Kubernetes extension),
     checked again here with ``GET /api/v1/nodes``. Baseline: the same command for a new
     cluster of the same size with the kube binaries hidden (``kube_binaries_dir`` set to
     nothing): containerd only, every node UP and HEALTHY.
(k4) a pod created → Running: ``POST`` of a pod (``roleserve.local/sandbox:busybox``,
     ``IfNotPresent``, ``sleep 3600``; placed by the scheduler) with the admin kubeconfig
     ``up`` wrote, then ``GET`` every 20 ms until its phase is Running; ``--pods`` of them,
     one after another, each deleted after, following one warm-up pod (timed apart: the
     first pod of a new cluster waits for what the controllers make at start). Baseline:
     the same container started directly through CRI (the plugin's ``CriClient``) on n1's
     containerd in the baseline cluster of (k3), which runs no kubelet (a kubelet kills the
     sandboxes it did not make): RunPodSandbox (CNI included), CreateContainer,
     StartContainer, which returns once it runs; after one warm-up pod.
(k5) the resident memory (VmRSS) of each kube component, etcd and containerd, per node,
     with the node's own process for scale, once the pods have run.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import logging
import os
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import anyio
from _proc import status_value
from _report import print_comparison, summarise

from roleserve_core import MonotonicClock, NodeRoles, RunnableStatus, State
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.runtime import NodeRuntime
from roleserve_core.testing import NodeHarness, SupervisorRunner
from roleserve_kubernetes.cri import CriClient, runtime_ready
from roleserve_kubernetes.image import SANDBOX_IMAGE
from roleserve_kubernetes.kubebuild import is_built, pinned_bin_dir
from roleserve_kubernetes.layout import WorkerLayout
from roleserve_kubernetes.proto import cri_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins" / "kubernetes"))
# The plugin tests' kit, by path.
from tests.kubernetes_real import (
    CONTAINERD_DN,
    DN,
    WORKER,
    missing_component,
    namespace,
    run_pod,
    start_worker,
)

POLL = 0.005
TIMEOUT = 120.0


def stopped(status: RunnableStatus) -> bool:
    return status.state is State.NEW and status.note == "waiting for its roles"


async def wait_ready(cri: CriClient) -> None:
    """Poll CRI Status until RuntimeReady; unreachable counts as not ready."""
    with anyio.fail_after(TIMEOUT):
        while True:
            try:
                if runtime_ready(await cri.status(deadline=1.0)):
                    return
            except Exception:  # the socket is not there yet
                pass
            await anyio.sleep(POLL)


async def role_flips(harness: NodeHarness, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        harness.set_roles(NodeRoles())
        await harness.wait_status(DN, stopped, timeout=TIMEOUT)
        start = time.perf_counter()
        harness.set_roles(WORKER)
        await harness.wait_state(CONTAINERD_DN, timeout=TIMEOUT)
        samples.append(time.perf_counter() - start)
    return samples


async def by_hand(layout: WorkerLayout, netns: str, rounds: int) -> list[float]:
    containerd = shutil.which("containerd")
    assert containerd is not None
    command = ["nsenter", f"--net=/var/run/netns/{netns}", containerd, "--config"]
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        process = await anyio.open_process(
            [*command, str(layout.config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        async with CriClient(layout.socket) as cri:
            await wait_ready(cri)
        samples.append(time.perf_counter() - start)
        process.terminate()
        await process.wait()
    return samples


async def pods(cri: CriClient, logs: Path, rounds: int) -> list[float]:
    samples = []
    for number in range(rounds):
        start = time.perf_counter()
        sandbox_id, container_id = await run_pod(cri, f"bench{number}", logs, "/bin/true")
        with anyio.fail_after(TIMEOUT):
            # CRI's events are a stream this subset leaves out: polling is the way.
            while (await cri.container_status(container_id)).state != cri_pb2.CONTAINER_EXITED:  # noqa: ASYNC110
                await anyio.sleep(POLL)
        samples.append(time.perf_counter() - start)
        await cri.stop_pod_sandbox(sandbox_id)
        await cri.remove_pod_sandbox(sandbox_id)
    return samples


async def ctr_runs(layout: WorkerLayout, rounds: int) -> list[float]:
    ctr = shutil.which("ctr")
    assert ctr is not None
    base = [ctr, "--address", str(layout.socket), "--namespace", "k8s.io", "run", "--rm"]
    samples = []
    for number in range(rounds):
        start = time.perf_counter()
        await anyio.run_process([*base, SANDBOX_IMAGE, f"ctr-bench-{number}", "/bin/true"])
        samples.append(time.perf_counter() - start)
    return samples


async def main(rounds: int) -> None:
    missing = missing_component()
    if missing:
        raise SystemExit(f"needs root, containerd, runc, ctr, CNI plugins, busybox: {missing}")
    directory = Path(tempfile.mkdtemp(prefix="rsk8s-bench-", dir="/tmp"))
    try:
        with namespace("rsk8sb") as netns:
            async with SupervisorRunner(MonotonicClock()) as runner:

                async def node(runtime: NodeRuntime) -> NodeHarness:
                    return await NodeHarness.start(runner, runtime)

                worker = await start_worker(node, directory, netns)
                await worker.harness.wait_state(CONTAINERD_DN, timeout=TIMEOUT)  # warm-up
                flips = await role_flips(worker.harness, rounds)

                async with CriClient(worker.layout.socket) as cri:
                    await pods(cri, directory / "pods", 2)  # warm-up
                    pod_samples = await pods(cri, directory / "pods", rounds)
                ctr_runs_samples = await ctr_runs(worker.layout, rounds)

                worker.harness.set_roles(NodeRoles())
                await worker.harness.wait_status(DN, stopped, timeout=TIMEOUT)
                hand = await by_hand(worker.layout, netns, rounds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    print_comparison(
        f"(k1) kubernetes_worker set → containerd CRI ready ({rounds} flips)",
        summarise(flips),
        summarise(hand),
        "containerd --config, same file, by hand, until CRI Status ready",
    )
    print_comparison(
        "(k2) pod sandbox + container of /bin/true, through the plugin's CRI client",
        summarise(pod_samples),
        summarise(ctr_runs_samples),
        "ctr run --rm, same image and command",
    )


# -- a local cluster with Kubernetes (k3, k4, k5) -----------------------------------------

HIDDEN = '[plugins.kubernetes]\nkube_binaries_dir = "/nonexistent/kube-binaries"\n'
"""A node's roleserve.toml without the kube binaries: the baseline of (k3)."""
UP_TIMEOUT = 1800.0
COMPONENTS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "containerd",
    "etcd",
)


def roleserve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "roleserve_core", *argv],
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT,
        check=False,
    )


def cluster_up(directory: Path, nodes: int, hidden: bool) -> float:
    """Seconds ``cluster up --detach`` of a new cluster takes (its nodes' roleserve.toml
    hiding the kube binaries if ``hidden``)."""
    if hidden:
        for index in range(1, nodes + 1):
            (directory / f"n{index}").mkdir(parents=True)
            (directory / f"n{index}" / "roleserve.toml").write_text(HIDDEN)
    first = f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11"
    start = time.perf_counter()
    done = roleserve("cluster", "up", "--nodes", str(nodes), "--detach", "--dir",
                     str(directory), "--first-address", first)  # fmt: skip
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"cluster up failed ({done.returncode}): {done.stdout}{done.stderr}")
    said = "the cluster is up" in done.stdout
    assert said, done.stdout
    return took


class Api:
    """The apiserver of the admin kubeconfig ``cluster up`` wrote: JSON over HTTPS."""

    def __init__(self, kubeconfig: Path) -> None:
        config = json.loads(kubeconfig.read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        host, _, port = cluster["server"].removeprefix("https://").rpartition(":")
        self.host, self.port = host, int(port)
        self.context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        chain = kubeconfig.with_name("bench-admin.pem")
        chain.touch(mode=0o600)
        chain.write_bytes(
            base64.b64decode(user["client-certificate-data"])
            + base64.b64decode(user["client-key-data"])
        )
        self.context.load_cert_chain(chain)
        chain.unlink()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=30
        )
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            connection.request(method, path, body=data, headers=headers)
            answer = connection.getresponse()
            text = answer.read()
        finally:
            connection.close()
        if answer.status >= 300:
            raise RuntimeError(f"{method} {path}: {answer.status} {text[:300]!r}")
        return json.loads(text)


def nodes_ready(api: Api) -> dict[str, bool]:
    items = api.call("GET", "/api/v1/nodes")["items"]
    return {
        item["metadata"]["name"]: any(
            c["type"] == "Ready" and c["status"] == "True" for c in item["status"]["conditions"]
        )
        for item in items
    }


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "sleep",
                    "image": SANDBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/busybox", "sleep", "3600"],
                }
            ],
        },
    }


def kube_pods(api: Api, count: int, prefix: str = "bench") -> tuple[list[float], dict[str, int]]:
    """Seconds from each pod's POST until its phase is Running; pods per node."""
    samples: list[float] = []
    placed: dict[str, int] = {}
    base = "/api/v1/namespaces/default/pods"
    for number in range(count):
        name = f"{prefix}-{number}"
        start = time.perf_counter()
        api.call("POST", base, pod(name))
        deadline = start + TIMEOUT
        while True:
            seen = api.call("GET", f"{base}/{name}")
            if seen["status"].get("phase") == "Running":
                break
            if time.perf_counter() > deadline:
                raise SystemExit(f"pod {name} not Running after {TIMEOUT:g} s: {seen['status']}")
            time.sleep(0.02)
        samples.append(time.perf_counter() - start)
        node = seen["spec"].get("nodeName", "?")
        placed[node] = placed.get(node, 0) + 1
        if samples[-1] > 2.0:  # the odd slow one: where, and when in the run
            print(f"  ({prefix}-{number} took {samples[-1]:.3f} s on {node})", flush=True)
        api.call("DELETE", f"{base}/{name}")
    return samples, placed


def node_id(node_directory: Path) -> str | None:
    return NodeDataDirectory(node_directory).read_node_id()


def containerd_socket(node_directory: Path) -> Path:
    """The CRI socket a node's containerd serves (its generated configuration's)."""
    config = node_directory / "plugins" / "kubernetes" / "containerd" / "config.toml"
    return Path(tomllib.loads(config.read_text())["grpc"]["address"])


async def cri_pods(socket: Path, logs: Path, count: int) -> list[float]:
    """Seconds of RunPodSandbox + CreateContainer + StartContainer of the same container."""
    samples = []
    async with CriClient(socket) as cri:
        for number in range(count):
            start = time.perf_counter()
            sandbox_id, _ = await run_pod(
                cri, f"cri-bench-{number}", logs, "/bin/busybox", "sleep", "3600"
            )
            samples.append(time.perf_counter() - start)
            await cri.stop_pod_sandbox(sandbox_id)
            await cri.remove_pod_sandbox(sandbox_id)
    return samples


def descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children] + [
        grandchild for child in children for grandchild in descendants(int(child))
    ]


def memory_table(directory: Path, nodes: int) -> list[str]:
    """One line a node: the VmRSS (MiB) of its process and each component it runs."""
    lines = [f"  {'node':<6}{'roleserve':>10}" + "".join(f"{c:>25}" for c in COMPONENTS)]
    totals = dict.fromkeys(COMPONENTS, 0.0)
    for index in range(1, nodes + 1):
        pid = int((directory / f"n{index}" / "node.pid").read_text())
        found: dict[str, float] = {}
        for child in descendants(pid):
            try:
                name = Path(f"/proc/{child}/comm").read_text().strip()
                command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]
                rss = status_value(child, "VmRSS") / 1024
            except (OSError, LookupError):
                continue
            component = Path(command.decode()).name or name
            if component in COMPONENTS:
                found[component] = found.get(component, 0.0) + rss
        for component, rss in found.items():
            totals[component] += rss
        own = status_value(pid, "VmRSS") / 1024
        cells = "".join(
            f"{found[c]:>21.1f} MiB" if c in found else f"{'-':>25}" for c in COMPONENTS
        )
        lines.append(f"  n{index:<5}{own:>6.1f} MiB{cells}")
    lines.append(f"  {'all':<16}" + "".join(f"{totals[c]:>21.1f} MiB" for c in COMPONENTS))
    return lines


async def cluster_main(nodes: int, pods: int) -> None:
    if shutil.which("ctr") is None or os.geteuid() != 0:
        raise SystemExit("needs root and containerd (bash .ci/system-packages)")
    if not is_built(pinned_bin_dir()):
        raise SystemExit("needs the kube binaries: ./dev kube-binaries")
    base = Path(tempfile.mkdtemp(prefix="rsk8s-", dir="/tmp"))
    directory = base / "kube"
    try:
        hidden = base / "bare"
        try:
            bare = cluster_up(hidden, nodes, hidden=True)
            # On a node without a kubelet: a kubelet kills the sandboxes it did not make.
            socket = containerd_socket(hidden / "n1")
            await cri_pods(socket, base / "cri-logs", 1)  # warm-up
            direct = await cri_pods(socket, base / "cri-logs", pods)
        finally:
            roleserve("cluster", "down", "--dir", str(hidden))
        try:
            try:
                up = cluster_up(directory, nodes, hidden=False)
            except SystemExit:
                print(f"(k3) baseline alone: cluster up of {nodes} nodes without the kube "
                      f"binaries took {bare:.3f} s; with them it failed:")  # fmt: skip
                raise
            api = Api(directory / "kubeconfig")
            ready = nodes_ready(api)
            if len(ready) != nodes or not all(ready.values()):
                raise SystemExit(f"cluster up returned with Nodes not Ready: {ready}")
            warm, _ = kube_pods(api, 1, "warm")  # the first pod of a new cluster waits
            kube, placed = kube_pods(api, pods)
            names = {node_id(directory / f"n{index}"): f"n{index}" for index in range(1, nodes + 1)}
            placed = {names.get(node, node): count for node, count in sorted(placed.items())}
            memory = memory_table(directory, nodes)
        finally:
            roleserve("cluster", "down", "--dir", str(directory))
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print_comparison(
        f"(k3) cluster up of {nodes} new nodes → every Node Ready",
        summarise([up]),
        summarise([bare]),
        "the same cluster up, kube binaries hidden: containerd only, UP and HEALTHY",
    )
    print_comparison(
        f"(k4) pod created → Running, {pods} pods one after another, after one warm-up pod "
        f"({warm[0]:.3f} s; placed: {placed})",
        summarise(kube),
        summarise(direct),
        "the same container through CRI, n1's containerd of the baseline cluster of (k3)",
    )
    print(f"(k5) resident memory (VmRSS) per node of {nodes}, after the pods")
    print("\n".join(memory))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--cluster", type=int, metavar="N", help="k3-k5 on a local cluster of N nodes instead"
    )
    parser.add_argument("--pods", type=int, default=20, help="pods of (k4)")
    options = parser.parse_args()
    logging.getLogger().addHandler(logging.NullHandler())  # the runnables' logs: not here
    if options.cluster:
        anyio.run(cluster_main, options.cluster, options.pods, backend="asyncio")
    else:
        anyio.run(main, options.rounds, backend="asyncio")
