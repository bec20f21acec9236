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
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from _report import print_comparison, summarise

from roleserve_core import MonotonicClock, NodeRoles, RunnableStatus, State
from roleserve_core.runtime import NodeRuntime
from roleserve_core.testing import NodeHarness, SupervisorRunner
from roleserve_kubernetes.cri import CriClient, runtime_ready
from roleserve_kubernetes.image import SANDBOX_IMAGE
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    options = parser.parse_args()
    logging.getLogger().addHandler(logging.NullHandler())  # the runnables' logs: not here
    anyio.run(main, options.rounds, backend="asyncio")
