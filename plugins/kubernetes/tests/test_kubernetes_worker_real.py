"""The worker with the real containerd, runc and CNI plugins, in a network namespace the
test makes: containerd answers CRI, a pod gets an address of the node's pod prefix and
runs a command, and removing the role leaves no process and no mount behind."""

from __future__ import annotations

import gc
import ipaddress
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import anyio
import pytest

from roleserve_core import (
    CLUSTER_NODES,
    ClusterNodes,
    NodeRoles,
    RunnableStatus,
    State,
    node_runtime_dir,
    read_record,
    read_stat,
)
from roleserve_core.testing import FakeClock, StartNode, node_record, poll_until, wait_for_value
from roleserve_kubernetes import POD_NETWORK, PodNetwork
from roleserve_kubernetes.cni import bridge_name
from roleserve_kubernetes.cri import NETWORK_READY, CriClient, runtime_ready
from roleserve_kubernetes.image import BUSYBOX_IMAGE, SANDBOX_IMAGE, OciArchive
from roleserve_kubernetes.leftovers import mounts_under, shim_pids
from roleserve_kubernetes.proto import cri_pb2
from roleserve_kubernetes.runtimecheck import CHECK_NAMESPACE

from .kubernetes_real import (
    CONTAINERD_DN,
    DN,
    NODE_ID_OF_TEST,
    deep_dir,
    run_pod,
    sandbox_config,
    start_worker,
    worker_netns,
)

__all__ = ["deep_dir", "worker_netns"]  # fixtures, used by name

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

SLOW = 60.0
"""Seconds for what a loaded 2-core machine may take (containerd's start, a pod's)."""


def cri_lines(path: Path) -> list[str]:
    """The text of a CRI log file's lines (``<time> <stream> <F|P> <text>``)."""
    return [line.split(" ", 3)[3] for line in path.read_text().splitlines() if line.count(" ") >= 3]


async def test_the_worker_starts_containerd_and_cri_answers(
    deep_dir: Path, worker_netns: str, node: StartNode
) -> None:
    """In a data directory 200 characters deep: containerd's sockets are in the node's
    runtime directory, where its depth does not matter; a stale one, as a killed node
    leaves it, is replaced."""
    stale = node_runtime_dir(deep_dir) / "kubernetes" / "containerd.sock"
    stale.parent.mkdir(mode=0o700, parents=True)
    with socket.socket(socket.AF_UNIX) as leftover:
        leftover.bind(str(stale))  # closed, the file stays: nobody listens
    worker = await start_worker(node, deep_dir, worker_netns)
    await worker.harness.wait_state(CONTAINERD_DN, timeout=SLOW)
    assert worker.layout.socket == node_runtime_dir(deep_dir) / "kubernetes" / "containerd.sock"
    served = await anyio.run_process(["ctr", "--address", str(worker.layout.socket), "version"])
    assert b"Server:" in served.stdout

    pods = await wait_for_value(
        worker.harness.runtime.registry.read(POD_NETWORK, "test"), lambda p: bool(p.prefixes)
    )
    assert pods == PodNetwork((ipaddress.ip_network("10.192.7.128/25"),))
    async with CriClient(worker.layout.socket) as cri:
        version = await cri.version()
        assert (version.runtime_name, version.runtime_api_version) == ("containerd", "v1")
        assert runtime_ready(await cri.status())
        # The CNI configuration the pod network wrote is picked up without a restart.
        await poll_until("NetworkReady", cri.status, lambda s: runtime_ready(s, NETWORK_READY))
    note = worker.harness.status(CONTAINERD_DN).note
    assert f"socket {worker.layout.socket}" in note
    # Before it said so, it started a container, in a containerd namespace of its own,
    # and removed it again.
    check = ["ctr", "--address", str(worker.layout.socket), "--namespace", CHECK_NAMESPACE]
    images = await anyio.run_process([*check, "images", "ls", "-q"])
    assert SANDBOX_IMAGE in images.stdout.decode().split()
    containers = await anyio.run_process([*check, "containers", "ls", "-q"])
    assert containers.stdout == b""
    # Its metrics where the exporter the plugin contributes says (in the namespace).
    scraped = await anyio.run_process(
        ["ip", "netns", "exec", worker_netns, "/bin/busybox", "wget", "-qO-",
         "http://127.0.0.1:7846/v1/metrics"],
    )  # fmt: skip
    assert b"containerd_" in scraped.stdout


async def test_running_containerd_keeps_no_image_archive_in_memory(
    tmp_path: Path, worker_netns: str, node: StartNode
) -> None:
    """The sandbox image's archive (~2 MiB: the busybox in it) is on disk once built;
    the running worker keeps only its images' IDs, not the archive's bytes."""
    worker = await start_worker(node, tmp_path, worker_netns)
    await worker.harness.wait_state(CONTAINERD_DN, timeout=SLOW)
    gc.collect()
    assert [kept for kept in gc.get_objects() if isinstance(kept, OciArchive)] == []
    assert worker.layout.image_tar.stat().st_size > 1 << 20


async def test_a_pod_gets_an_address_of_the_node_prefix_and_runs_a_command(
    deep_dir: Path, worker_netns: str, node: StartNode
) -> None:
    worker = await start_worker(node, deep_dir, worker_netns)
    await worker.harness.wait_state(CONTAINERD_DN, timeout=SLOW)
    await worker.harness.wait_state(f"{DN}.pod_network")
    logs = deep_dir / "pods" / "hello"
    async with CriClient(worker.layout.socket) as cri:
        sandbox_id, container_id = await run_pod(
            cri,
            "hello",
            logs,
            "/bin/sh",
            "-c",
            "ip -4 -o addr show eth0; echo hello from $(hostname)",
        )
        status = await poll_until(
            "the container to exit",
            lambda: cri.container_status(container_id),
            lambda s: s.state == cri_pb2.CONTAINER_EXITED,
            timeout=SLOW,
        )
        assert (status.exit_code, status.reason) == (0, "Completed")
        sandbox = await cri.pod_sandbox_status(sandbox_id)

    address = ipaddress.ip_address(sandbox.network.ip)
    assert address in ipaddress.ip_network("10.192.7.128/25")
    assert address != ipaddress.ip_address("10.192.7.129")  # the bridge's, the gateway
    lines = cri_lines(logs / "hello.log")
    assert lines[-1] == "hello from hello"
    assert re.search(rf"inet {re.escape(str(address))}/25 ", lines[0]), lines


async def test_a_pod_of_the_busybox_image_runs_its_args_without_a_registry(
    deep_dir: Path, worker_netns: str, node: StartNode
) -> None:
    """``roleserve.local/busybox:latest`` is there without a pull, and runs what a pod
    gives it as ``args`` (its Cmd: no entrypoint stands before them), as Docker Hub's
    busybox does."""
    worker = await start_worker(node, deep_dir, worker_netns)
    await worker.harness.wait_state(CONTAINERD_DN, timeout=SLOW)
    logs = deep_dir / "pods" / "args"
    async with CriClient(worker.layout.socket) as cri:
        image = await cri.image_status(BUSYBOX_IMAGE)
        assert image is not None
        assert BUSYBOX_IMAGE in image.repo_tags
        await poll_until("NetworkReady", cri.status, lambda s: runtime_ready(s, NETWORK_READY))
        sandbox = sandbox_config("args", logs)
        sandbox_id = await cri.run_pod_sandbox(sandbox)
        container = cri_pb2.ContainerConfig(
            metadata=cri_pb2.ContainerMetadata(name="args"),
            image=cri_pb2.ImageSpec(image=BUSYBOX_IMAGE),
            args=["sh", "-c", "echo args ran in $(hostname)"],
            log_path="args.log",
        )
        container_id = await cri.create_container(sandbox_id, container, sandbox)
        await cri.start_container(container_id)
        status = await poll_until(
            "the container to exit",
            lambda: cri.container_status(container_id),
            lambda s: s.state == cri_pb2.CONTAINER_EXITED,
            timeout=SLOW,
        )
    assert status.exit_code == 0, cri_lines(logs / "args.log")
    assert cri_lines(logs / "args.log") == ["args ran in args"]


FAILING_RUNC = """#!/bin/sh
# runc, except that it cannot create a container (as runc without cgroups could not). It
# says why where runc does: a JSON line in its --log file, which the shim reads.
log=/dev/null previous=
for argument; do
    if [ "$previous" = --log ]; then log=$argument; fi
    if [ "$argument" = create ]; then
        echo '{{"level":"error","msg":"runc create failed: made to fail by the test"}}' >>"$log"
        exit 1
    fi
    previous=$argument
done
exec {runc} "$@"
"""


@pytest.fixture
def failing_runc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``runc`` on PATH (containerd's, and so its shims') fails to create any container;
    the real one does the rest (``delete``, ``state``)."""
    real = shutil.which("runc")
    assert real is not None  # the worker_netns fixture needs it
    directory = tmp_path / "failing-runc"
    directory.mkdir()
    runc = directory / "runc"
    runc.write_text(FAILING_RUNC.format(runc=real))
    runc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{directory}:{os.environ['PATH']}")


async def test_a_runtime_that_cannot_start_a_container_is_not_healthy(
    deep_dir: Path, worker_netns: str, failing_runc: None, node: StartNode
) -> None:
    """CRI says RuntimeReady, but runc cannot create a container: containerd never turns
    HEALTHY; its error says why in one line (runc's own), and it is retried (a runc fixed
    is found by the next start). The check's container is not left behind."""
    worker = await start_worker(node, deep_dir, worker_netns)
    seen: list[State] = []

    def failed(status: RunnableStatus) -> bool:
        seen.append(status.state)
        return status.failures >= 1

    status = await worker.harness.wait_status(CONTAINERD_DN, failed, timeout=SLOW)
    assert State.HEALTHY not in seen
    assert status.state is not State.HEALTHY
    assert status.last_error is not None
    summary = status.last_error.summary()
    assert summary == (
        "roleserve_kubernetes.errors.RuntimeCannotRunError: containerd cannot start a "
        "container: the check could not start a container (containerd namespace "
        f"{CHECK_NAMESPACE}): failed to create shim task: OCI runtime create failed: runc "
        "create failed: made to fail by the test: unknown"
    )
    assert not status.final  # retried after the backoff
    assert shim_pids(worker.layout.socket) == []


async def test_removing_the_role_leaves_no_process_and_no_mount(
    deep_dir: Path, worker_netns: str, node: StartNode
) -> None:
    worker = await start_worker(node, deep_dir, worker_netns)
    await worker.harness.wait_state(CONTAINERD_DN, timeout=SLOW)
    layout = worker.layout
    record = read_record(deep_dir / "plugins" / "kubernetes" / "containerd.process.json")
    async with CriClient(layout.socket) as cri:
        _, container_id = await run_pod(
            cri, "sleeper", deep_dir / "pods" / "sleeper", "/bin/sleep", "3600"
        )
        await poll_until(
            "the container to run",
            lambda: cri.container_status(container_id),
            lambda s: s.state == cri_pb2.CONTAINER_RUNNING,
            timeout=SLOW,
        )
    shims = shim_pids(layout.socket)
    assert shims, "a running pod has a shim"
    assert mounts_under([layout.root, layout.state]), "a running pod has mounts"
    bridge = bridge_name(NODE_ID_OF_TEST)
    assert link_exists(worker_netns, bridge), "a pod's network has the node's bridge"

    worker.harness.set_roles(NodeRoles())

    def waiting(status: RunnableStatus) -> bool:
        return status.state is State.NEW and status.note == "waiting for its roles"

    await worker.harness.wait_status(DN, waiting, timeout=SLOW)
    assert shim_pids(layout.socket) == []
    assert not any(_alive(pid) for pid in shims)
    assert not _alive(record.pid)
    assert mounts_under([deep_dir]) == []
    assert not link_exists(worker_netns, bridge)
    assert not (deep_dir / "plugins" / "kubernetes" / "containerd.process.json").exists()
    pods = worker.harness.runtime.registry.read(POD_NETWORK, "test").get_nowait()
    assert pods == PodNetwork(())


def link_exists(netns: str, name: str) -> bool:
    shown = subprocess.run(
        ["ip", "-n", netns, "link", "show", "dev", name], capture_output=True, timeout=30
    )
    return shown.returncode == 0


def _alive(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and not stat.gone


async def test_a_new_prefix_restarts_containerd_and_new_pods_get_its_addresses(
    deep_dir: Path, worker_netns: str, node: StartNode, fake_clock: FakeClock
) -> None:
    worker = await start_worker(node, deep_dir, worker_netns)
    await worker.harness.wait_state(CONTAINERD_DN, timeout=SLOW)
    async with CriClient(worker.layout.socket) as cri:
        await poll_until("NetworkReady", cri.status, lambda s: runtime_ready(s, NETWORK_READY))
        first, _ = await run_pod(cri, "first", deep_dir / "pods" / "first", "/bin/sleep", "600")
        address = (await cri.pod_sandbox_status(first)).network.ip
        assert ipaddress.ip_address(address) in ipaddress.ip_network("10.192.7.128/25")

    record = node_record(NODE_ID_OF_TEST, cluster_prefix="10.192.9.0/24")
    worker.harness.set(CLUSTER_NODES, ClusterNodes({NODE_ID_OF_TEST: record}, backlogged=True))
    status = await worker.harness.wait_status(CONTAINERD_DN, lambda s: s.failures == 1)
    assert status.last_error is not None
    assert status.last_error.summary() == (
        "roleserve_kubernetes.errors.PodPrefixChangedError: this node's pod prefix changed "
        "from 10.192.7.128/25 to 10.192.9.128/25; restarting containerd without the old "
        "pods and their bridge"
    )
    assert shim_pids(worker.layout.socket) == []
    await fake_clock.advance_to_next()  # the backoff
    await worker.harness.wait_state(CONTAINERD_DN, timeout=SLOW)
    async with CriClient(worker.layout.socket) as cri:
        assert await cri.list_pod_sandboxes() == []
        await poll_until("NetworkReady", cri.status, lambda s: runtime_ready(s, NETWORK_READY))
        second, _ = await run_pod(cri, "second", deep_dir / "pods" / "second", "/bin/true")
        address = (await cri.pod_sandbox_status(second)).network.ip
    assert ipaddress.ip_address(address) in ipaddress.ip_network("10.192.9.128/25")
