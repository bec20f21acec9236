"""Against real wireguard-go, in network namespaces the test makes (see conftest).

Skipped, with the reason, without root, /dev/net/tun, ip, wireguard-go or wg; failed
instead under ``ROLESERVE_REQUIRE_REAL=1``.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import subprocess
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from roleserve_clusternet import link
from roleserve_clusternet.device import DeviceChange, PeerConfig
from roleserve_clusternet.interface import InterfaceSpec, UapiInterface, open_interface
from roleserve_clusternet.privatekey import WireGuardKey, load_or_create_key
from roleserve_clusternet.settings import ClusternetSettings
from roleserve_clusternet.testing import (
    ClusternetHooks,
    NetnsPair,
    Side,
    netns_pair,
    tcp_exchange,
    wg,
)
from roleserve_clusternet.values import CLUSTERNET_STATUS, ClusternetStatus
from roleserve_clusternet.worker_clusternet import configure_device
from roleserve_core import (
    CURATOR_CONNECTION,
    NODE_ID,
    LogFollower,
    State,
    common_pb2,
    curator_pb2,
    read_record,
)
from roleserve_core.testing import (
    DEFAULT_TIMEOUT,
    FakeClock,
    FakeCluster,
    StartNode,
    node_record,
    start_plugin_node,
    wait_for_value,
)

__all__ = ["netns_pair"]  # the fixture, imported to be found

pytestmark = pytest.mark.anyio

LOG = logging.getLogger("test.clusternet")
PORT = 7838


async def open_side(
    stack: AsyncExitStack, side: Side, pair: NetnsPair, key: WireGuardKey, state_dir: Path
) -> UapiInterface:
    """``side``'s interface as the worker makes it: wireguard-go, key, port, up, route,
    address."""
    spec = InterfaceSpec(side.interface, 1420, pair.mesh, state_dir, netns=side.netns)
    device, _ = await stack.enter_async_context(open_interface(LOG, spec))
    await configure_device(device, key, ClusternetSettings(listen_port=PORT))
    await link.set_up(side.interface, 1420, pair.mesh, side.netns)
    await device.set_address(ipaddress.ip_interface(f"{side.mesh_address}/32"))
    return device


def peer_of(side: Side, key: WireGuardKey) -> PeerConfig:
    return PeerConfig(key.public, f"{side.veth_address}:{PORT}", (side.prefix,), 1)


async def test_two_interfaces_carry_tcp_and_count_it(netns_pair: NetnsPair, tmp_path: Path) -> None:
    """In plugin directories 200 characters deep: wireguard-go's UAPI socket is in
    ``/var/run/wireguard``, where it and ``wg`` look, whatever the data directory."""
    a, b = netns_pair.a, netns_pair.b
    key_a, key_b = WireGuardKey.generate(), WireGuardKey.generate()
    deep = tmp_path / ("d" * (200 - len(str(tmp_path)) - 3))
    async with AsyncExitStack() as stack:
        device_a = await open_side(stack, a, netns_pair, key_a, deep / "a")
        device_b = await open_side(stack, b, netns_pair, key_b, deep / "b")
        await device_a.configure(DeviceChange(peers=(peer_of(b, key_b),)))
        await device_b.configure(DeviceChange(peers=(peer_of(a, key_a),)))

        state = await device_a.read()
        assert (state.private_key, state.listen_port) == (key_a.private, PORT)
        assert [peer.config() for peer in state.peers.values()] == [peer_of(b, key_b)]
        assert wg(a, "show", a.interface, "public-key").strip() == key_a.public_base64

        reply = await anyio.to_thread.run_sync(tcp_exchange, b, a, "over the mesh")
        assert reply == "OVER THE MESH"
        after = (await device_a.read()).peers[key_b.public]
        assert after.last_handshake is not None
        assert after.rx_bytes > 0
        assert after.tx_bytes > 0


def routed(side: Side, network: ipaddress.IPv4Network) -> bool:
    """Whether ``side``'s namespace routes ``network`` through its interface."""
    shown = ip_in(side, "route", "show", str(network))
    return f"dev {side.interface} " in shown


def ip_in(side: Side, *arguments: str) -> str:
    done = subprocess.run(
        ["ip", "-n", side.netns, *arguments], check=True, capture_output=True, text=True
    )
    return done.stdout


async def test_set_address_routes_the_cluster_network_again(
    netns_pair: NetnsPair, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The kernel drops every route through an interface when its last IPv4 address goes
    (an address that changes, or one removed by hand); ``set_address``, which the reconcile
    calls once every interval, routes the cluster network through it again, with a WARNING."""
    a = netns_pair.a
    async with AsyncExitStack() as stack:
        device = await open_side(stack, a, netns_pair, WireGuardKey.generate(), tmp_path)
        assert routed(a, netns_pair.mesh)
        await link.set_address(a.interface, None, a.netns)  # its only address gone
        assert not routed(a, netns_pair.mesh)
        with caplog.at_level(logging.WARNING, LOG.name):
            await device.set_address(ipaddress.ip_interface(f"{a.mesh_address}/32"))
        assert routed(a, netns_pair.mesh)
        missing = f"the route of {netns_pair.mesh} through {a.interface} was missing; set again"
        assert [record.getMessage() for record in caplog.records] == [missing]
        caplog.clear()
        await device.set_address(ipaddress.ip_interface(f"{a.mesh_address}/32"))
        assert not caplog.records  # routed already: nothing to say


def record(
    node_id: str, side: Side, key: WireGuardKey | None = None, prefix: str = ""
) -> curator_pb2.Node:
    if key is None:
        return node_record(node_id, side.veth_address, cluster_prefix=prefix)
    return node_record(
        node_id,
        side.veth_address,
        cluster_prefix=prefix,
        wireguard_pubkey=key.public_base64,
        prefixes=[str(side.prefix)],
    )


def has_peer(node_id: str) -> Callable[[ClusternetStatus], bool]:
    return lambda status: status.up and any(peer.node_id == node_id for peer in status.peers)


async def wait_logged(log: LogFollower, text: str) -> None:
    with anyio.fail_after(DEFAULT_TIMEOUT):
        async for entry in log:
            if text in entry.message:
                return


DN = "root.role.clusternet"


async def test_the_worker_keeps_the_mesh_and_survives_wireguard_go(
    netns_pair: NetnsPair,
    fake_cluster: FakeCluster,
    fake_clock: FakeClock,
    node: StartNode,
    tmp_path: Path,
) -> None:
    a, b = netns_pair.a, netns_pair.b
    own = fake_cluster.credentials.node_id
    data_dir = tmp_path / "node" / "plugins" / "clusternet"
    key_a = load_or_create_key(data_dir)  # the key the worker will find
    key_b = WireGuardKey.generate()
    leader = await fake_cluster.curator()
    leader.set_node(record(own, a, prefix=str(a.prefix)))
    leader.set_node(record("node-b", b, key_b))

    config = {
        "interface": a.interface,
        "cluster_network": str(netns_pair.mesh),
        "keepalive": 1,
        "reconcile_interval": 0.5,
    }
    harness = await start_plugin_node(
        node,
        tmp_path / "node",
        {"clusternet": ClusternetHooks(netns=a.netns)},
        config={"clusternet": config},
        cluster_nodes=True,
    )
    status = harness.runtime.registry.read(CLUSTERNET_STATUS, "test")
    async with AsyncExitStack() as stack:
        device_b = await open_side(stack, b, netns_pair, key_b, tmp_path / "b")
        await device_b.configure(DeviceChange(peers=(peer_of(a, key_a),)))

        harness.set(NODE_ID, own)
        harness.set(CURATOR_CONNECTION, fake_cluster.connect(leader))
        await harness.wait_state(DN, State.HEALTHY)
        first = await wait_for_value(status, has_peer("node-b"))
        assert (first.interface, first.public_key, first.listen_port) == (
            a.interface,
            key_a.public_base64,
            PORT,
        )
        [peer] = first.peers
        assert (peer.endpoint, peer.allowed_ips) == (f"{b.veth_address}:{PORT}", (str(b.prefix),))
        await leader.wait_calls("UpdateNodeClusterNetworking", 1)
        announced = common_pb2.NodeClusterNetworking(
            wireguard_pubkey=key_a.public_base64, prefixes=[f"{a.mesh_address}/32"]
        )
        assert leader.requests("UpdateNodeClusterNetworking") == [
            curator_pb2.UpdateNodeClusterNetworkingRequest(clusternet=announced)
        ]
        assert await anyio.to_thread.run_sync(tcp_exchange, b, a, "one") == "ONE"
        await wait_for_value(status, lambda s: has_peer("node-b")(s) and s.peers[0].rx_bytes > 0)

        # A peer removed by hand comes back at the next reconcile.
        with harness.runtime.logtree.follow(f"{DN}.reconcile") as log:
            wg(a, "set", a.interface, "peer", key_b.public_base64, "remove")
            await wait_logged(log, "peer node-b missing")
        assert wg(a, "show", a.interface, "peers").split() == [key_b.public_base64]
        assert await anyio.to_thread.run_sync(tcp_exchange, b, a, "two") == "TWO"

        # wireguard-go killed: the worker fails, restarts, and configures it all again.
        pid = read_record(data_dir / "wireguard-go.process.json").pid
        os.kill(pid, signal.SIGKILL)
        dead = await harness.wait_status(DN, lambda s: s.failures == 1)
        assert dead.last_error is not None
        assert dead.last_error.message == "wireguard-go ended by signal SIGKILL: no output"
        await wait_for_value(status, lambda s: not s.up)
        await fake_clock.wait_sleepers(1)  # the restart, waiting out its backoff
        fake_clock.advance(60)
        await harness.wait_state(DN, State.HEALTHY)
        assert read_record(data_dir / "wireguard-go.process.json").pid != pid
        await wait_for_value(status, has_peer("node-b"))
        assert await anyio.to_thread.run_sync(tcp_exchange, b, a, "three") == "THREE"
