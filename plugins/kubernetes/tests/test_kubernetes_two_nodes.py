"""Two nodes in two network namespaces joined by a veth pair: a pod on one reaches a pod
on the other over the clusternet mesh, by its own address.

Node A runs the real clusternet worker (wireguard-go) and the kubernetes worker, fed by a
fake curator holding both nodes' records; node B runs the kubernetes worker, and its side
of the mesh is made by hand, as the clusternet tests make it. Each node's prefix is a /28
of the test's mesh network (10.254.x.0/24, inside the namespaces only); the pods get its
upper /29. Needs root, wireguard-go, wg, containerd, runc, the CNI plugins and busybox;
skipped (saying what is missing) without them or without the clusternet plugin.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from roleserve_core import CURATOR_CONNECTION, NODE_ID, State
from roleserve_core.testing import (
    FakeCluster,
    StartNode,
    node_record,
    poll_until,
    require_real,
    start_plugin_node,
)
from roleserve_kubernetes.cri import NETWORK_READY, CriClient, runtime_ready
from roleserve_kubernetes.layout import WorkerLayout
from roleserve_kubernetes.proto import cri_pb2

from .kubernetes_hooks import KubernetesHooks
from .kubernetes_real import (
    CONTAINERD_DN,
    WORKER,
    deep_dir,
    missing_component,
    run_pod,
    start_worker,
)

__all__ = ["deep_dir"]  # the fixture, imported to be found

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

SLOW = 60.0
LOG = logging.getLogger("test.kubernetes.two_nodes")


def clusternet_kit() -> ModuleType:
    """clusternet's test kit (``roleserve_clusternet.testing``); the test is skipped, saying
    so, where the clusternet plugin is not installed."""
    kit: ModuleType = pytest.importorskip("roleserve_clusternet.testing")
    return kit


@pytest.fixture
def pair() -> Iterator[Any]:
    """Two namespaces joined by a veth pair (clusternet's kit), removed after the test."""
    kit = clusternet_kit()
    missing = missing_component() or kit.real_wireguard_available()
    require_real(
        "root, wireguard-go, wg, containerd, runc, the CNI plugins and busybox-static",
        not missing,
        f"missing: {missing}; apt-get install wireguard-go wireguard-tools containerd runc "
        "containernetworking-plugins busybox-static, run as root",
    )
    with kit.namespace_pair("rsk2") as made:
        yield made


async def test_a_pod_reaches_a_pod_of_another_node_over_the_mesh(
    pair: Any, deep_dir: Path, fake_cluster: FakeCluster, node: StartNode
) -> None:
    from roleserve_clusternet.testing import (
        ClusternetHooks,
        ClusternetSettings,
        DeviceChange,
        InterfaceSpec,
        PeerConfig,
        WireGuardKey,
        configure_device,
        link,
        load_or_create_key,
        open_interface,
    )

    a, b = pair.a, pair.b
    own = fake_cluster.credentials.node_id
    key_a = load_or_create_key(deep_dir / "a" / "plugins" / "clusternet")
    key_b = WireGuardKey.generate()
    leader = await fake_cluster.curator()
    leader.set_node(node_record(own, a.veth_address, cluster_prefix=str(a.prefix)))
    leader.set_node(
        node_record(
            "node-b",
            b.veth_address,
            cluster_prefix=str(b.prefix),
            wireguard_pubkey=key_b.public_base64,
            prefixes=[str(b.prefix)],
        )
    )

    # Node A: clusternet and kubernetes, fed by the fake curator.
    plugins = {
        "clusternet": ClusternetHooks(netns=a.netns),
        "kubernetes": KubernetesHooks(netns=a.netns),
    }
    config = {
        "clusternet": {"interface": a.interface, "cluster_network": str(pair.mesh), "keepalive": 1},
        "kubernetes": {},
    }
    node_a = await start_plugin_node(
        node, deep_dir / "a", plugins, config=config, cluster_nodes=True
    )
    node_a.set(NODE_ID, own)
    node_a.set(CURATOR_CONNECTION, fake_cluster.connect(leader))
    node_a.set_roles(WORKER)

    # Node B: kubernetes, and its side of the mesh by hand.
    node_b = await start_worker(node, deep_dir / "b", b.netns, str(b.prefix), "node-b")
    async with AsyncExitStack() as stack:
        spec = InterfaceSpec(b.interface, 1420, pair.mesh, deep_dir / "wg-b", netns=b.netns)
        device_b, _ = await stack.enter_async_context(open_interface(LOG, spec))
        await configure_device(device_b, key_b, ClusternetSettings(listen_port=7838))
        await link.set_up(b.interface, 1420, pair.mesh, b.netns)
        await device_b.set_address(ipaddress.ip_interface(f"{b.mesh_address}/32"))
        peer_a = PeerConfig(key_a.public, f"{a.veth_address}:7838", (a.prefix,), 1)
        await device_b.configure(DeviceChange(peers=(peer_a,)))

        await node_a.wait_state("root.role.clusternet", State.HEALTHY, timeout=SLOW)
        await node_a.wait_state(CONTAINERD_DN, timeout=SLOW)
        await node_b.harness.wait_state(CONTAINERD_DN, timeout=SLOW)
        layout_a = WorkerLayout.of(node_a.runtime.context("kubernetes"))

        async with CriClient(node_b.layout.socket) as cri_b, CriClient(layout_a.socket) as cri_a:
            for cri in (cri_a, cri_b):
                await poll_until(
                    "NetworkReady", cri.status, lambda s: runtime_ready(s, NETWORK_READY)
                )
            target, _ = await run_pod(cri_b, "target", deep_dir / "pods" / "t", "/bin/sleep", "600")
            address = (await cri_b.pod_sandbox_status(target)).network.ip
            assert ipaddress.ip_address(address) in list(b.prefix.subnets(1))[1]
            logs = deep_dir / "pods" / "p"
            _, pinger = await run_pod(
                cri_a, "pinger", logs, "/bin/sh", "-c", f"ping -c 5 -W 2 {address}; echo exit=$?"
            )
            status = await poll_until(
                "the pinger to exit",
                lambda: cri_a.container_status(pinger),
                lambda s: s.state == cri_pb2.CONTAINER_EXITED,
                timeout=SLOW,
            )
        output = (logs / "pinger.log").read_text()
        assert status.exit_code == 0, output
        assert "exit=0" in output, output
        assert f"bytes from {address}" in output, output
