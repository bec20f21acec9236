"""The worker's decisions, in process: a fake curator, the core's nodewatch, and an
interface in memory (no kernel, no wireguard-go)."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest

from roleserve_clusternet.device import DeviceChange, MemoryInterface, PeerConfig
from roleserve_clusternet.privatekey import WireGuardKey, load_or_create_key
from roleserve_clusternet.push import WAITING_FOR_PREFIX
from roleserve_clusternet.testing import ClusternetHooks
from roleserve_clusternet.values import CLUSTERNET_STATUS, ClusternetStatus
from roleserve_clusternet.worker_clusternet import RUNNABLES
from roleserve_core import (
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    NODE_ID,
    State,
    ValueKey,
    common_pb2,
    curator_pb2,
    hookimpl,
)
from roleserve_core.testing import (
    FakeCluster,
    FakeCurator,
    NodeHarness,
    StartNode,
    node_record,
    start_plugin_node,
    wait_for_value,
)

pytestmark = pytest.mark.anyio

DN = "root.role.clusternet"
net = ipaddress.ip_network
KEY_A = WireGuardKey.generate()
KEY_B = WireGuardKey.generate()
KEY_C = WireGuardKey.generate()


class Kubernetes:
    """Stands in for the kubernetes plugin: it owns ``pod_network``, the key that plugin
    declares (clusternet runs without it: only the test that registers this needs it)."""

    @hookimpl
    def roleserve_values(self) -> list[ValueKey[Any]]:
        from roleserve_kubernetes import POD_NETWORK

        return [POD_NETWORK]


def record(
    node_id: str,
    key: WireGuardKey | str | None = None,
    prefixes: tuple[str, ...] = (),
    address: str = "10.0.0.9",
    *,
    cluster_prefix: str = "",
    state: int = common_pb2.NODE_STATE_UP,
) -> curator_pb2.Node:
    public = key if isinstance(key, str) or key is None else key.public_base64
    return node_record(
        node_id,
        address,
        state=state,  # type: ignore[arg-type]
        cluster_prefix=cluster_prefix,
        wireguard_pubkey=public or "",
        prefixes=prefixes if key is not None else (),
    )


class Node:
    """A node running the plugin on a memory interface, with its key known in advance."""

    def __init__(self, harness: NodeHarness, device: MemoryInterface, key: WireGuardKey) -> None:
        self.harness = harness
        self.device = device
        self.key = key
        self.status = harness.runtime.registry.read(CLUSTERNET_STATUS, "test")


async def start(
    node: StartNode,
    tmp_path: Path,
    *,
    kubernetes: bool = False,
    children: tuple[str, ...] = RUNNABLES,
    **settings: Any,
) -> Node:
    device = MemoryInterface()
    hooks = ClusternetHooks(device=device, children=children)
    plugins: dict[str, object] = {"clusternet": hooks}
    if kubernetes:
        plugins["kubernetes"] = Kubernetes()
    key = load_or_create_key(tmp_path / "node" / "plugins" / "clusternet")
    settings.setdefault("reconcile_interval", 3600.0)  # passes only when kicked
    config = {"clusternet": settings}
    harness = await start_plugin_node(
        node, tmp_path / "node", plugins, config=config, cluster_nodes=True
    )
    return Node(harness, device, key)


def connect(started: Node, cluster: FakeCluster, curator: FakeCurator) -> None:
    started.harness.set(NODE_ID, cluster.credentials.node_id)
    started.harness.set(CURATOR_CONNECTION, cluster.connect(curator))


def request(key: WireGuardKey, *prefixes: str) -> curator_pb2.UpdateNodeClusterNetworkingRequest:
    return curator_pb2.UpdateNodeClusterNetworkingRequest(
        clusternet=common_pb2.NodeClusterNetworking(
            wireguard_pubkey=key.public_base64, prefixes=list(prefixes)
        )
    )


def peer(key: WireGuardKey, address: str, *prefixes: str) -> PeerConfig:
    """The peer the default settings make: no persistent keepalive (Monogon's)."""
    return PeerConfig(key.public, f"{address}:7838", tuple(net(p) for p in prefixes), 0)


async def wait_changes(device: MemoryInterface, count: int) -> tuple[DeviceChange, ...]:
    return await wait_for_value(device.changes, lambda changes: len(changes) >= count)


# -- push -----------------------------------------------------------------------------


async def test_push_waits_for_the_prefix_then_announces_and_retries(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    leader.set_node(record(own))
    started = await start(node, tmp_path)
    connect(started, fake_cluster, leader)
    await started.harness.wait_status(f"{DN}.push", lambda s: s.note == WAITING_FOR_PREFIX)
    assert leader.requests("UpdateNodeClusterNetworking") == []

    leader.refuse("UpdateNodeClusterNetworking", grpc.StatusCode.UNAVAILABLE, "not now")
    leader.set_node(record(own, cluster_prefix="10.192.7.0/24"))
    await leader.wait_calls("UpdateNodeClusterNetworking", 1)
    leader.allow("UpdateNodeClusterNetworking")
    await started.harness.wait_state(f"{DN}.push", State.HEALTHY)
    wanted = request(started.key, "10.192.7.1/32")
    assert leader.requests("UpdateNodeClusterNetworking") == [wanted, wanted]
    # the fake curator keeps it in the node's record, as the curator does
    status = await wait_for_value(started.status, lambda s: s.prefixes == ("10.192.7.1/32",))
    assert status.public_key == started.key.public_base64


async def test_push_announces_again_on_a_new_leader_and_with_pod_prefixes(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    kubernetes = pytest.importorskip("roleserve_kubernetes")  # whose pod_network it announces
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    leader.set_node(record(own, cluster_prefix="10.192.7.0/24"))
    started = await start(node, tmp_path, kubernetes=True)
    connect(started, fake_cluster, leader)
    await leader.wait_calls("UpdateNodeClusterNetworking", 1)

    pods = kubernetes.PodNetwork((net("10.244.3.0/24"), net("fd00:44::/64")))
    started.harness.set(kubernetes.POD_NETWORK, pods, by="kubernetes")
    await leader.wait_calls("UpdateNodeClusterNetworking", 2)
    with_pods = request(started.key, "10.192.7.1/32", "10.244.3.0/24", "fd00:44::/64")
    assert leader.requests("UpdateNodeClusterNetworking") == [
        request(started.key, "10.192.7.1/32"),
        with_pods,
    ]

    successor = await fake_cluster.curator()
    successor.set_node(record(own, cluster_prefix="10.192.7.0/24"))
    started.harness.set(CURATOR_CONNECTION, fake_cluster.connect(successor))
    await successor.wait_calls("UpdateNodeClusterNetworking", 1)
    assert successor.requests("UpdateNodeClusterNetworking") == [with_pods]
    assert len(leader.requests("UpdateNodeClusterNetworking")) == 2


# -- pull -----------------------------------------------------------------------------


async def test_pull_follows_the_cluster_in_batches_and_retries_a_failed_one(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    leader.set_node(record(own, cluster_prefix="10.192.7.0/24"))
    leader.set_node(record("node-a", KEY_A, ("10.192.1.1/32",), "10.0.0.2"))
    leader.set_node(record("node-b", KEY_B, ("10.192.2.1/32",), "10.0.0.3"))
    started = await start(node, tmp_path)
    device = started.device
    connect(started, fake_cluster, leader)
    a = peer(KEY_A, "10.0.0.2", "10.192.1.1/32")
    b = peer(KEY_B, "10.0.0.3", "10.192.2.1/32")
    setup = DeviceChange(private_key=started.key.private, listen_port=7838)
    by_key = tuple(sorted((a, b), key=lambda p: p.public_key))  # a batch sets peers by key
    assert await wait_changes(device, 2) == (setup, DeviceChange(peers=by_key))
    own_address = ipaddress.ip_interface("10.192.7.1/32")
    await wait_for_value(device.address, lambda address: address == own_address)
    await started.harness.wait_state(f"{DN}.reconcile", State.HEALTHY)
    # push's announcement changes this node's record: one more view, before the batches
    views = started.harness.runtime.registry.read(CLUSTER_NODES, "test")
    await wait_for_value(views, lambda view: view[own].clusternet.wireguard_pubkey != "")

    # A change that does not touch the peers is no batch; prefixes compared by value.
    leader.set_node(record("node-a", KEY_A, ("10.192.1.1/32",), "10.0.0.2", state=2))
    # A failed batch: kept, retried by reconcile at once, and again by the next batch.
    device.fail(1)
    a2 = peer(KEY_A, "10.0.0.2", "10.192.1.1/32", "10.244.1.0/24")
    leader.set_node(record("node-a", KEY_A, ("10.244.1.0/24", "10.192.1.1/32"), "10.0.0.2"))
    assert (await wait_changes(device, 3))[2:] == (DeviceChange(peers=(a2,)),)
    assert device.failed == [DeviceChange(peers=(a2,))]

    leader.set_node(record("node-b", KEY_B, ("10.192.2.1/32",), "10.0.0.3", state=4))
    changes = await wait_changes(device, 4)
    assert changes[3:] == (DeviceChange(peers=(a2,), remove=(KEY_B.public,)),)
    assert device.peers == {KEY_A.public: a2}

    leader.remove_node("node-a")
    assert (await wait_changes(device, 5))[4:] == (DeviceChange(remove=(KEY_A.public,)),)
    assert device.peers == {}
    assert started.harness.status(f"{DN}.pull").failures == 0
    # Each applied batch is read back into the status at once, not a reconcile_interval
    # (an hour here) later.
    await wait_for_value(started.status, lambda status: status.peers == ())


async def test_a_batch_is_read_back_without_netlink_and_a_failed_address_is_set_at_once(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    """Reading a batch back into the status (a kick) leaves the address and route alone:
    each check is a netlink session, and a forming cluster sends every node a batch per
    node that joins. An address pull could not set is the exception: the pass it asks
    for sets it at once, not a reconcile_interval (an hour here) later. Without push,
    whose announcement of the new address would make a view that pull retries on."""
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    leader.set_node(record(own, cluster_prefix="10.192.7.0/24"))
    leader.set_node(record("node-a", KEY_A, ("10.192.1.1/32",), "10.0.0.2"))
    started = await start(node, tmp_path, children=("pull", "reconcile"))
    device = started.device
    connect(started, fake_cluster, leader)
    await wait_for_value(started.status, lambda status: len(status.peers) == 1)
    checks = device.address_calls  # pull's, and reconcile's first pass

    leader.set_node(record("node-b", KEY_B, ("10.192.2.1/32",), "10.0.0.3"))
    await wait_for_value(started.status, lambda status: len(status.peers) == 2)
    leader.set_node(record("node-c", KEY_C, ("10.192.3.1/32",), "10.0.0.4"))
    await wait_for_value(started.status, lambda status: len(status.peers) == 3)
    assert device.address_calls == checks

    device.fail_address(1)
    leader.set_node(record(own, cluster_prefix="10.192.8.0/24"))
    new_address = ipaddress.ip_interface("10.192.8.1/32")
    await wait_for_value(device.address, lambda address: address == new_address)
    assert device.address_calls == checks + 2  # pull's, refused; reconcile's
    assert started.harness.status(f"{DN}.reconcile").failures == 0


async def test_kicks_more_often_than_the_interval_still_leave_the_address_checked(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    """A cluster that churns kicks reconcile more often than its interval: the address and
    route are checked once an interval all the same (each kick restarted the wait for the
    timed pass, which alone checked them)."""
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    leader.set_node(record(own, cluster_prefix="10.192.7.0/24"))
    started = await start(node, tmp_path, reconcile_interval=0.5)
    connect(started, fake_cluster, leader)
    own_address = ipaddress.ip_interface("10.192.7.1/32")
    await wait_for_value(started.device.address, lambda address: address == own_address)
    await started.harness.wait_state(f"{DN}.reconcile", State.HEALTHY)  # its first pass
    started.device.address.set(None)  # as `ip addr del`
    batches = len(started.device.changes.get_nowait())

    async def churn() -> None:
        for number in range(1, 1000):  # a new peer, so a batch and a kick, every 0.1 s
            key = WireGuardKey.generate()
            address = f"10.0.{number // 200}.{number % 200 + 10}"
            leader.set_node(record(f"node-{number}", key, (f"10.193.{number}.1/32",), address))
            await anyio.sleep(0.1)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(churn)
        await wait_for_value(started.device.address, lambda address: address == own_address)
        tasks.cancel_scope.cancel()
    assert len(started.device.changes.get_nowait()) > batches + 2  # it did churn


async def test_bad_records_are_skipped_once_each_and_the_rest_is_kept(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    leader.set_node(record(own, cluster_prefix="10.192.7.0/24"))
    leader.set_node(record("node-a", KEY_A, ("10.192.1.1/32",), "10.0.0.2"))
    leader.set_node(record("node-x", "bm90IGEga2V5", ("10.192.9.1/32",), "10.0.0.5"))
    started = await start(node, tmp_path)
    connect(started, fake_cluster, leader)
    await wait_changes(started.device, 2)
    # the same bad key again (another field changed), then another bad value
    leader.set_node(record("node-x", "bm90IGEga2V5", ("10.192.9.1/32",), "10.0.0.6"))
    leader.set_node(record("node-x", KEY_C, ("10.192.9.1/99",), "10.0.0.6"))
    leader.set_node(record("node-b", KEY_B, ("10.192.2.1/32",), "10.0.0.3"))
    await wait_changes(started.device, 3)
    warnings = [
        entry.message
        for entry in started.harness.runtime.logtree.entries(f"{DN}.pull")
        if entry.level == logging.WARNING
    ]
    assert warnings == [
        "skipped node node-x: a WireGuard key that does not parse (9 bytes, not 32): "
        "'bm90IGEga2V5'",
        "skipped node node-x: a prefix that does not parse: '10.192.9.1/99'",
    ]
    assert set(started.device.peers) == {KEY_A.public, KEY_B.public}


async def test_reconcile_puts_back_what_was_changed_by_hand_and_reports_status(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    leader.set_node(record(own, cluster_prefix="10.192.7.0/24"))
    leader.set_node(record("node-a", KEY_A, ("10.192.1.1/32",), "10.0.0.2"))
    started = await start(node, tmp_path, reconcile_interval=0.05)
    connect(started, fake_cluster, leader)
    status = await wait_for_value(started.status, lambda s: len(s.peers) == 1 and s.prefixes != ())
    assert status == ClusternetStatus(
        interface="clusternet",
        public_key=started.key.public_base64,
        listen_port=7838,
        prefixes=("10.192.7.1/32",),
        peers=status.peers,
    )
    assert (status.peers[0].node_id, status.peers[0].allowed_ips) == ("node-a", ("10.192.1.1/32",))

    own_address = started.device.address.get_nowait()
    assert own_address == ipaddress.ip_interface("10.192.7.1/32")
    started.device.address.set(None)  # as `ip addr del`: a timed pass puts it back
    await wait_for_value(started.device.address, lambda address: address == own_address)

    started.device.remove_peer(KEY_A.public)  # as `wg set IF peer KEY remove`
    await started.device.configure(DeviceChange(listen_port=9999))
    with anyio.fail_after(10):
        while (
            set(started.device.peers) != {KEY_A.public} or started.device.state.listen_port != 7838
        ):
            await wait_changes(started.device, len(started.device.changes.get_nowait()) + 1)
    [entry] = [
        e.message
        for e in started.harness.runtime.logtree.entries(f"{DN}.reconcile")
        if e.level == logging.WARNING
    ]
    assert entry == (
        "clusternet differed from the wanted state (listen port 9999, peer node-a missing); "
        "set again"
    )
