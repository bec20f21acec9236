"""clusternet: the WireGuard mesh's UAPI configuration, throughput and update latency.

Run (root, wireguard-go, wg, ip, etcd; ``bash .ci/system-packages``):
``./dev sync && .venv/bin/python benchmarks/clusternet.py [--peers 1000] [--mib 100]
[--rounds 3] [--changes 200] [--no-cluster]``.

Everything happens in two network namespaces this program makes, joined by a veth pair
(addresses in 10.254.0.0/16, only there; the plugin's test kit,
``roleserve_clusternet.testing.netns``), and is removed at the end: namespaces, links,
wireguard-go processes. Each figure is printed next to a baseline measured in the same
run, and the ratio of the two:

(n1) ``--peers`` synthetic peers (keys from ``cryptography``'s X25519, allowed IPs
     distinct /24s of 10.192.0.0/11, endpoints at ports of the other namespace's veth
     address, no keepalive) configured on a real wireguard-go interface without peers the
     way a new run of the worker does it: ``configure_device`` (private key, listen port:
     one ``set=1``), then pull's batch, ``plan({}, wanted)`` and
     ``UapiInterface.configure`` (one ``set=1``). Baseline: ``wg setconf`` of the
     equivalent wg config file (private key, listen port, peers: ``setconf`` replaces the
     whole device). Then reading the device back: ``UapiInterface.read`` (``get=1``,
     parsed to ``DeviceState``) against ``wg showconf``. Between two rounds the peers are
     removed (untimed). Last, one ``reconcile_once`` pass (read back, compare, set the
     address over netlink, build the status) on the interface holding those peers,
     against ``UapiInterface.read`` alone. Fails if the interface read back does not hold
     exactly the wanted peers after either way, or if reconcile finds a difference.
(n2) TCP throughput of ``--mib`` MiB, one connection, from a sender process in one
     namespace to a receiver process in the other (``ip netns exec``, this Python): between
     the two WireGuard addresses of two wireguard-go interfaces the plugin's code made and
     configured as each other's peer, against the same between the veth addresses. Time
     measured by the receiver from accept to end of stream. To tell the plugin's part from
     wireguard-go's, the same transfers (interleaved) also run over two more wireguard-go
     started and configured by hand in the same namespaces (``ip netns exec``, ``wg set``,
     ``ip``; no roleserve; UDP 7839, addresses of 10.253.X.0/24). Those are started in a
     session of their own, as the program runner starts the plugin's: with the kernel's
     scheduler autogroups (``/proc/sys/kernel/sched_autogroup_enabled``), a session is a
     scheduling group, and wireguard-go sharing this program's session with the sender
     and receiver ran 15-30 % faster than the runner's, configured alike. Fails if a
     transfer is short.
(n3) Time from a node's networking update until every other node's interface holds it,
     on three nodes of ``roleserve cluster up --netns --nodes 3`` (made in this program's
     scratch directory, taken down after; its network is the 198.18.0.0/15 /24 that ``up``
     picks): n1 sends ``UpdateNodeClusterNetworking`` (its key, its own /32 and a new /32
     of its allocated prefix) to the leader with its own credentials; n2's and n3's
     interfaces are read back over UAPI ``get=1`` (``/var/run/wireguard/<ifname>.sock``,
     polled every 0.5 ms from this process) until both hold the new prefixes as n1's
     allowed IPs. Path: curator, etcd, Watch, each node's nodewatch, pull, ``set=1``.
     Baseline: the round trip of the same ``UpdateNodeClusterNetworking`` call. Fails if a
     change is not seen within 10 s. ``--no-cluster`` leaves it out (forming the cluster
     takes about 15 s and needs etcd).
(n4) The same path in-process, without etcd: another node's ``UpdateNodeClusterNetworking``
     at a ``FakeCurator`` (real gRPC, mutual TLS) until this node's interface holds the
     new prefixes. This node is a node runtime in a process of its own (``PluginHarness``
     with the core's nodewatch and the clusternet worker, its wireguard-go in the first
     namespace). Baseline: the round trip of the same call.

The program also fails if anything of the run is left behind: its namespaces, the
cluster's, UAPI sockets, processes.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from _child import child_node
from _report import print_comparison, summarise
from anyio.streams.buffered import BufferedByteReceiveStream

from roleserve_clusternet import link
from roleserve_clusternet.device import IPNetwork, PeerConfig, sorted_networks
from roleserve_clusternet.interface import InterfaceSpec, UapiInterface, open_interface
from roleserve_clusternet.mesh import Mesh
from roleserve_clusternet.peers import Wanted, plan
from roleserve_clusternet.privatekey import WireGuardKey, decode_key
from roleserve_clusternet.reconcile import reconcile_once
from roleserve_clusternet.settings import ClusternetSettings
from roleserve_clusternet.testing import (
    ClusternetHooks,
    NetnsPair,
    Side,
    namespace_pair,
    real_wireguard_available,
    tcp_exchange,
)
from roleserve_clusternet.uapi import UapiSocket, socket_path
from roleserve_clusternet.worker_clusternet import configure_device
from roleserve_core import State
from roleserve_core.clock import MonotonicClock
from roleserve_core.identity import NodeCredentials
from roleserve_core.localcluster.netns import NetnsPlan, subnet_for
from roleserve_core.ports import CURATOR_PORT, endpoint
from roleserve_core.proto import common_pb2, curator_pb2, curator_pb2_grpc
from roleserve_core.rpc import secure_channel
from roleserve_core.testing import (
    FakeCurator,
    NodeHarness,
    PluginHarness,
    SupervisorRunner,
    ThrowawayCA,
)
from roleserve_core.values import CURATOR_CONNECTION, NODE_ID, CuratorConnection

LOG = logging.getLogger("benchmark.clusternet")
PORT = 7838
MTU = 1420
SYNTHETIC = ipaddress.IPv4Network("10.192.0.0/11")
"""(n1)'s allowed IPs: one /24 of it per peer; routed through the interface of (n1)."""
FIRST_PEER_PORT = 20000
POLL = 0.0005
"""Seconds between two UAPI reads of (n3)."""
SEEN_TIMEOUT = 10.0
WARM_UP = 10
"""Changes of (n3) made before those timed."""
DN = "root.role.clusternet"


# -- namespaces ---------------------------------------------------------------------------


async def open_side(
    stack: AsyncExitStack,
    side: Side,
    name: str,
    route: IPNetwork,
    key: WireGuardKey,
    state_dir: Path,
    address: str | None = None,
) -> UapiInterface:
    """An interface in ``side``'s namespace as the worker makes it: wireguard-go under the
    program runner, key and port over UAPI, MTU, up, route, address."""
    spec = InterfaceSpec(name, MTU, route, state_dir, netns=side.netns)
    device, _ = await stack.enter_async_context(open_interface(LOG, spec))
    await configure_device(device, key, ClusternetSettings(listen_port=PORT))
    await link.set_up(name, MTU, route, side.netns)
    if address is not None:
        await device.set_address(ipaddress.ip_interface(f"{address}/32"))
    return device


# -- (n1) 1,000 peers ---------------------------------------------------------------------


def synthetic_peers(count: int, host: str) -> dict[bytes, PeerConfig]:
    """``count`` peers: X25519 keys, a /24 of SYNTHETIC each, an endpoint at ``host``."""
    nets = SYNTHETIC.subnets(new_prefix=24)
    peers = {}
    for index in range(count):
        key = WireGuardKey.generate().public
        where = f"{host}:{FIRST_PEER_PORT + index}"
        peers[key] = PeerConfig(key, where, (next(nets),), 0)
    return peers


def wg_config(key: WireGuardKey, peers: dict[bytes, PeerConfig]) -> str:
    """The same device as a ``wg setconf`` file: ``setconf`` replaces the whole device, so
    the file holds the private key and listen port too."""
    lines = ["[Interface]", f"PrivateKey = {base64.b64encode(key.private).decode()}"]
    lines.append(f"ListenPort = {PORT}")
    for peer in peers.values():
        lines += [
            "",
            "[Peer]",
            f"PublicKey = {base64.b64encode(peer.public_key).decode()}",
            f"Endpoint = {peer.endpoint}",
            "AllowedIPs = " + ", ".join(str(n) for n in peer.allowed_ips),
        ]
    return "\n".join(lines) + "\n"


async def clear_peers(device: UapiInterface) -> None:
    answer = await device.uapi.request("set=1\nreplace_peers=true\n\n")
    assert answer.strip() == "errno=0", answer


async def holds_exactly(device: UapiInterface, wanted: dict[bytes, PeerConfig]) -> bool:
    state = await device.read()
    return {key: peer.config() for key, peer in state.peers.items()} == wanted


async def many_peers(pair: NetnsPair, count: int, rounds: int, scratch: Path) -> bool:
    """(n1); whether both ways ended with the wanted peers, every round."""
    wanted = synthetic_peers(count, pair.b.veth_address)
    key = WireGuardKey.generate()
    config = scratch / "peers.conf"
    config.write_text(wg_config(key, wanted))
    config.chmod(0o600)
    name = f"{pair.a.interface}1"
    configured: list[float] = []
    setconf: list[float] = []
    read: list[float] = []
    showconf: list[float] = []
    ok = True
    async with AsyncExitStack() as stack:
        device = await open_side(stack, pair.a, name, SYNTHETIC, key, scratch / "n1")
        settings = ClusternetSettings(listen_port=PORT)
        for _ in range(rounds):  # interleaved, so that the machine's load hits both alike
            await clear_peers(device)
            start = time.perf_counter()
            await configure_device(device, key, settings)  # as a new run of the worker:
            await device.configure(plan({}, wanted))  # its key and port, then pull's batch
            configured.append(time.perf_counter() - start)
            start = time.perf_counter()
            state = await device.read()
            read.append(time.perf_counter() - start)
            ok = ok and len(state.peers) == count and await holds_exactly(device, wanted)

            await clear_peers(device)
            start = time.perf_counter()
            await anyio.run_process(["wg", "setconf", name, str(config)])
            setconf.append(time.perf_counter() - start)
            start = time.perf_counter()
            shown = (await anyio.run_process(["wg", "showconf", name])).stdout
            showconf.append(time.perf_counter() - start)
            ok = ok and shown.count(b"[Peer]") == count and await holds_exactly(device, wanted)
        passes, reads, quiet = await reconcile_passes(device, key, wanted, pair.a, rounds)
        ok = ok and quiet and await holds_exactly(device, wanted)
    print_comparison(
        f"(n1) configure {count:,} peers on an empty interface ({rounds} rounds)",
        summarise(configured),
        summarise(setconf),
        "wg setconf of the same peers",
    )
    print_comparison(
        f"(n1) read {count:,} peers back ({rounds} rounds)",
        summarise(read),
        summarise(showconf),
        "wg showconf",
    )
    print_comparison(
        f"(n1) one reconcile pass with nothing to change, {count:,} peers ({rounds} rounds)",
        summarise(passes),
        summarise(reads),
        "UapiInterface.read alone",
    )
    if not quiet:
        print(
            "  (n1) FAILED: reconcile found a difference on an interface holding the wanted peers"
        )
    return ok


class Recorded(logging.Handler):
    """Keeps the messages of the WARNING records of a logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class StatusSink:
    """Stands in for the worker's ``PluginValues``: reconcile sets the status on it."""

    def set(self, key: object, value: object) -> None:
        self.value = value


async def reconcile_passes(
    device: UapiInterface,
    key: WireGuardKey,
    wanted: dict[bytes, PeerConfig],
    side: Side,
    rounds: int,
) -> tuple[list[float], list[float], bool]:
    """``reconcile_once`` on ``device``, which holds ``wanted`` already, against
    ``device.read()`` alone, interleaved: (passes, reads, whether no pass found a
    difference)."""
    mesh = Mesh(device, key, ClusternetSettings(listen_port=PORT))
    mesh.wanted.set(Wanted(wanted, {}))
    mesh.address.set(ipaddress.ip_interface(f"{side.mesh_address}/32"))
    log = logging.getLogger("benchmark.clusternet.reconcile")
    log.propagate = False
    recorded = Recorded()
    log.handlers[:] = [recorded]
    ctx: Any = type("Context", (), {"log": log})()
    values: Any = StatusSink()
    passes: list[float] = []
    reads: list[float] = []
    await reconcile_once(ctx, values, mesh)  # the first sets the address
    for _ in range(rounds):
        start = time.perf_counter()
        await reconcile_once(ctx, values, mesh)
        passes.append(time.perf_counter() - start)
        start = time.perf_counter()
        await device.read()
        reads.append(time.perf_counter() - start)
    return passes, reads, not recorded.messages


# -- (n2) throughput ----------------------------------------------------------------------

RECEIVER = """
import socket, sys, time
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
connection, _ = server.accept()
start = time.perf_counter()
buffer = bytearray(1 << 20)
total = 0
while True:
    got = connection.recv_into(buffer)
    if not got:
        break
    total += got
print(total, time.perf_counter() - start, flush=True)
"""

SENDER = """
import socket, sys
data = memoryview(bytes(1 << 20))
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as connection:
    for _ in range(int(sys.argv[3])):
        connection.sendall(data)
"""


async def transfer(sender: Side, receiver: Side, address: str, mib: int) -> tuple[int, float]:
    """(bytes received, seconds) of one transfer of ``mib`` MiB to ``address``."""
    command = ["ip", "netns", "exec"]
    python = [sys.executable, "-c"]
    async with await anyio.open_process(
        [*command, receiver.netns, *python, RECEIVER, address], stderr=subprocess.DEVNULL
    ) as listening:
        assert listening.stdout is not None
        lines = BufferedByteReceiveStream(listening.stdout)
        with anyio.fail_after(120):
            port = (await lines.receive_until(b"\n", 100)).decode()
            await anyio.run_process(
                [*command, sender.netns, *python, SENDER, address, port, str(mib)]
            )
            total, seconds = (await lines.receive_until(b"\n", 100)).decode().split()
    return int(total), float(seconds)


async def throughput(pair: NetnsPair, mib: int, rounds: int, scratch: Path) -> bool:
    """(n2); whether every transfer arrived whole."""
    a, b = pair.a, pair.b
    key_a, key_b = WireGuardKey.generate(), WireGuardKey.generate()
    hand_a, hand_b = hand_made_sides(pair)
    mesh: list[float] = []
    hand: list[float] = []
    bare: list[float] = []
    ok = True
    async with AsyncExitStack() as stack:
        device_a = await open_side(
            stack, a, a.interface, pair.mesh, key_a, scratch / "a", a.mesh_address
        )
        device_b = await open_side(
            stack, b, b.interface, pair.mesh, key_b, scratch / "b", b.mesh_address
        )
        for device, other, key in ((device_a, b, key_b), (device_b, a, key_a)):
            peer = PeerConfig(key.public, f"{other.veth_address}:{PORT}", (other.prefix,), 0)
            await device.configure(plan({}, {key.public: peer}))
        await stack.enter_async_context(hand_made_mesh(hand_a, hand_b, scratch))
        for server, client in ((b, a), (hand_b, hand_a)):
            reply = await anyio.to_thread.run_sync(tcp_exchange, server, client, "handshake")
            ok = ok and reply == "HANDSHAKE"
        ways = ((mesh, b.mesh_address), (hand, hand_b.mesh_address), (bare, b.veth_address))
        for _ in range(rounds):  # interleaved, so that the machine's load hits all alike
            for samples, address in ways:
                total, seconds = await transfer(a, b, address, mib)
                ok = ok and total == mib << 20
                samples.append(seconds)
    print_comparison(
        f"(n2) TCP transfer of {mib} MiB, A → B ({rounds} rounds)",
        summarise(mesh),
        summarise(bare),
        "the same over the bare veth",
    )
    speed, speed_hand, speed_bare = (
        summarise([mib * 2**20 / 1e6 / s for s in samples]).median for samples, _ in ways
    )
    print(
        f"  throughput  mesh {speed:,.0f} MB/s, veth {speed_bare:,.0f} MB/s:"
        f" the mesh carries {speed / speed_bare:.2f}× the veth's"
    )
    print(
        f"  and         {speed_hand:,.0f} MB/s over two wireguard-go started and configured"
        f" by hand (wg set, ip; no roleserve): the plugin's mesh carries"
        f" {speed / speed_hand:.2f}× that"
    )
    return ok


HAND_PORT = PORT + 1


def hand_made_sides(pair: NetnsPair) -> tuple[Side, Side]:
    """The sides of the hand-made mesh of (n2): in the same namespaces, interfaces named
    as the plugin's plus ``h``, prefixes of 10.253.X.0/24 (X as in the pair's mesh)."""
    network = ipaddress.IPv4Network(f"10.253.{pair.mesh.network_address.packed[2]}.0/24")
    first, second = list(network.subnets(4))[:2]
    return (
        replace(pair.a, interface=f"{pair.a.interface}h", prefix=first),
        replace(pair.b, interface=f"{pair.b.interface}h", prefix=second),
    )


def terminate(process: anyio.abc.Process) -> None:
    with suppress(ProcessLookupError):
        process.terminate()


@asynccontextmanager
async def hand_made_mesh(a: Side, b: Side, scratch: Path) -> AsyncIterator[None]:
    """The mesh of (n2) without roleserve, between ``a`` and ``b``: wireguard-go run with
    ``ip netns exec``, configured with ``wg set`` and ``ip``; stopped at the end."""
    sides = (a, b)
    keys = [WireGuardKey.generate() for _ in sides]
    environment = {**os.environ, "WG_PROCESS_FOREGROUND": "1", "LOG_LEVEL": "error"}
    network = a.prefix.supernet(new_prefix=24)
    async with AsyncExitStack() as stack:
        for side in sides:
            process = await anyio.open_process(
                ["ip", "netns", "exec", side.netns, "wireguard-go", "-f", side.interface],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=environment,
                start_new_session=True,  # as the program runner: see the module docstring
            )
            stack.push_async_callback(process.aclose)
            stack.callback(terminate, process)
        with anyio.fail_after(10):
            while True:
                if all(socket_path(side.interface).exists() for side in sides):
                    break
                await anyio.sleep(0.02)  # polling a program's startup
        for side, key, other, other_key in zip(sides, keys, sides[::-1], keys[::-1], strict=True):
            private = scratch / f"{side.interface}.key"
            private.write_text(base64.b64encode(key.private).decode())
            private.chmod(0o600)
            await anyio.run_process(
                ["wg", "set", side.interface, "private-key", str(private),
                 "listen-port", str(HAND_PORT), "peer", base64.b64encode(other_key.public).decode(),
                 "endpoint", f"{other.veth_address}:{HAND_PORT}", "allowed-ips", str(other.prefix)]
            )  # fmt: skip
            ip = ["ip", "-n", side.netns]
            await anyio.run_process([*ip, "link", "set", side.interface, "mtu", str(MTU), "up"])
            address = f"{side.mesh_address}/32"
            await anyio.run_process([*ip, "addr", "add", address, "dev", side.interface])
            await anyio.run_process([*ip, "route", "add", str(network), "dev", side.interface])
        yield


# -- (n4) update → configured, in process -------------------------------------------------


async def run_node(
    directory: Path, endpoint: str, curator_id: str, netns: str, interface: str, mesh: str
) -> None:
    """The node of (n4), in a process of its own: print ``ready`` once the clusternet
    worker is healthy, then run until stdin closes."""
    logging.getLogger("roleserve").propagate = False
    credentials = NodeCredentials.load(directory / "node")
    channel = secure_channel(endpoint, credentials, node_id=curator_id)
    plugins = PluginHarness(cluster_nodes=True)
    plugins.register(ClusternetHooks(netns=netns), "clusternet")
    config = {"interface": interface, "cluster_network": mesh}
    runtime = plugins.runtime(directory / "data", config={"clusternet": config})
    async with channel, SupervisorRunner(MonotonicClock()) as runner:
        harness = await NodeHarness.start(runner, runtime)
        harness.set(NODE_ID, credentials.node_id)
        connection = CuratorConnection(credentials.node_id, curator_id, endpoint, channel)
        harness.set(CURATOR_CONNECTION, connection)
        await harness.wait_state(DN, State.HEALTHY, timeout=30)
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # until stdin closes


def record(
    node_id: str, side: Side, key: WireGuardKey | None = None, prefix: str = ""
) -> curator_pb2.Node:
    node = curator_pb2.Node(id=node_id, state=common_pb2.NODE_STATE_UP, cluster_prefix=prefix)
    node.status.external_address = side.veth_address
    if key is not None:
        node.clusternet.wireguard_pubkey = key.public_base64
        node.clusternet.prefixes.append(str(side.prefix))
    return node


async def wait_allowed(
    uapi: UapiSocket, key: bytes, wanted: tuple[IPNetwork, ...], seen: list[float]
) -> None:
    """Read the interface back until peer ``key`` has allowed IPs ``wanted``; append when.

    :raises TimeoutError: not within SEEN_TIMEOUT.
    """
    with anyio.fail_after(SEEN_TIMEOUT):
        while True:
            peer = (await uapi.get()).peers.get(key)
            if peer is not None and peer.allowed_ips == wanted:
                seen.append(time.perf_counter())
                return
            await anyio.sleep(POLL)


async def update_latency(pair: NetnsPair, changes: int, scratch: Path) -> bool:
    """(n4); whether every change reached the interface."""
    a, b = pair.a, pair.b
    ca = ThrowawayCA()
    node_a, node_b = ca.node(), ca.node()
    directory = scratch / "n3"
    node_a.save(directory / "node")
    key_b = WireGuardKey.generate()
    name = f"{a.interface}3"
    latency: list[float] = []
    round_trip: list[float] = []
    async with FakeCurator(ca.node()) as curator:
        curator.lead()
        curator.set_node(record(node_a.node_id, a, prefix=str(a.prefix)))
        curator.set_node(record(node_b.node_id, b, key_b))
        arguments = [str(directory), curator.endpoint, curator.node_id, a.netns, name]
        try:
            async with child_node(__file__, [*arguments, str(pair.mesh)]) as process:
                assert process.stdout is not None
                with anyio.fail_after(60):
                    line = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 100)
                assert line == b"ready", line
                uapi = UapiSocket(name)
                await wait_allowed(uapi, key_b.public, (b.prefix,), [])
                channel = secure_channel(curator.endpoint, node_b, node_id=curator.node_id)
                async with channel:
                    stub = curator_pb2_grpc.CuratorStub(channel)
                    for change in range(-WARM_UP, changes):
                        extra = ipaddress.ip_network(f"{pair.mesh[128 + change % 128]}/32")
                        wanted = sorted_networks([b.prefix, extra])
                        start, answered, seen = await announce(stub, key_b.public, wanted, [uapi])
                        if change >= 0:
                            latency.append(seen[0] - start)
                            round_trip.append(answered - start)
        except TimeoutError:
            print(f"(n4) FAILED: a change did not reach {name} within {SEEN_TIMEOUT:g} s")
            return False
    print_comparison(
        f"(n4) another node's UpdateNodeClusterNetworking → its new prefixes on this node's"
        f" interface (UAPI read-back), {changes} changes; IN-PROCESS VERSION: a FakeCurator"
        " and one node runtime (nodewatch + clusternet pull, real wireguard-go), not"
        " `cluster up --netns`",
        summarise(latency),
        summarise(round_trip),
        "the UpdateNodeClusterNetworking round trip itself",
    )
    return True


# -- (n3) three nodes of `cluster up --netns` ----------------------------------------------

ROLESERVE = [sys.executable, "-m", "roleserve_core"]


async def roleserve(*arguments: str) -> str:
    """What ``roleserve ARGUMENTS`` printed.

    :raises RuntimeError: it failed.
    """
    done = await anyio.run_process([*ROLESERVE, *arguments], check=False)
    if done.returncode:
        output = (done.stdout + done.stderr).decode()[-800:]
        raise RuntimeError(f"roleserve {' '.join(arguments)} exited {done.returncode}: {output}")
    return done.stdout.decode()


async def three_nodes(changes: int, scratch: Path) -> tuple[bool, str]:
    """(n3) on a cluster of its own, taken down after; (whether every change reached both
    other nodes' interfaces, what names the cluster's leftovers start with)."""
    directory = scratch / "cluster"
    plan = NetnsPlan(subnet_for(directory), 3)
    try:
        await roleserve(
            "cluster", "up", "--netns", "--nodes", "3", "--detach", "--dir", str(directory)
        )
        return await cluster_latency(directory, changes), plan.prefix
    except RuntimeError as exc:
        print(f"(n3) FAILED: {exc}")
        return False, plan.prefix
    finally:
        with anyio.move_on_after(60, shield=True):
            await anyio.run_process(
                [*ROLESERVE, "cluster", "down", "--dir", str(directory)], check=False
            )


async def cluster_latency(directory: Path, changes: int) -> bool:
    """Node n1 announces new prefixes to the leader with its own credentials; n2's and
    n3's interfaces are read back until both hold them."""
    nodes = json.loads(await roleserve("cluster", "status", "--json", "--dir", str(directory)))
    leader = next(node for node in nodes if node["cluster"]["leader"])
    mover, *others = nodes
    credentials = NodeCredentials.load(Path(mover["directory"]) / "node" / "credentials")
    key = decode_key(mover["cluster"]["clusternet"]["wireguard_pubkey"])
    [own] = [ipaddress.ip_network(p) for p in mover["cluster"]["clusternet"]["prefixes"]]
    allocated = ipaddress.ip_network(mover["cluster"]["cluster_prefix"])
    sockets = []
    for node in others:
        config = tomllib.loads((Path(node["directory"]) / "roleserve.toml").read_text())
        sockets.append(UapiSocket(config["plugins"]["clusternet"]["interface"]))
    for uapi in sockets:
        await wait_allowed(uapi, key, (own,), [])
    latency: list[float] = []
    round_trip: list[float] = []
    where = endpoint(leader["address"], CURATOR_PORT)
    try:
        async with secure_channel(where, credentials, node_id=leader["cluster"]["id"]) as channel:
            stub = curator_pb2_grpc.CuratorStub(channel)
            for change in range(-WARM_UP, changes):
                extra = ipaddress.ip_network(f"{allocated[2 + change % 200]}/32")
                wanted = sorted_networks([own, extra])
                start, answered, seen = await announce(stub, key, wanted, sockets)
                if change >= 0:
                    latency.append(max(seen) - start)
                    round_trip.append(answered - start)
    except TimeoutError:
        print(f"(n3) FAILED: a change did not reach n2 and n3 within {SEEN_TIMEOUT:g} s")
        return False
    print_comparison(
        f"(n3) n1's UpdateNodeClusterNetworking (new prefixes) → n2's and n3's interfaces"
        f" hold them (UAPI read-back), {changes} changes; THREE NODES of"
        " `roleserve cluster up --netns` (etcd, curator, nodewatch, pull, wireguard-go)",
        summarise(latency),
        summarise(round_trip),
        "the UpdateNodeClusterNetworking round trip to the leader itself",
    )
    return True


async def announce(
    stub: curator_pb2_grpc.CuratorAsyncStub,
    key: bytes,
    prefixes: tuple[IPNetwork, ...],
    sockets: list[UapiSocket],
) -> tuple[float, float, list[float]]:
    """Announce ``prefixes`` for ``key``, reading ``sockets`` back meanwhile: (start,
    answered, when each socket showed them), on ``time.perf_counter``.

    :raises TimeoutError: a socket did not show them within SEEN_TIMEOUT.
    """
    announced = common_pb2.NodeClusterNetworking(
        wireguard_pubkey=base64.b64encode(key).decode(), prefixes=[str(n) for n in prefixes]
    )
    request = curator_pb2.UpdateNodeClusterNetworkingRequest(clusternet=announced)
    seen: list[float] = []
    start = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for uapi in sockets:
            tasks.start_soon(wait_allowed, uapi, key, prefixes, seen)
        await stub.UpdateNodeClusterNetworking(request)
        answered = time.perf_counter()
    return start, answered, seen


# -- the program --------------------------------------------------------------------------


def leftovers(tags: list[str]) -> list[str]:
    """What of this run is still there: namespaces, links, UAPI sockets and processes
    whose names (command lines) hold one of ``tags``."""

    def tagged(text: str) -> bool:
        return any(tag in text for tag in tags)

    def listed(*command: str) -> list[str]:
        done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=30)
        return done.stdout.splitlines()

    found = [f"namespace {line}" for line in listed("ip", "netns", "list") if tagged(line)]
    found += [f"link {line[:60]}" for line in listed("ip", "-o", "link") if tagged(line)]
    found += [str(path) for path in socket_path("x").parent.glob("*") if tagged(path.name)]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(words).decode(errors="replace")
        if cmdline.parent.name != str(os.getpid()) and tagged(text):
            found.append(f"process {cmdline.parent.name}: {text[:100]}")
    return found


async def main(peers: int, mib: int, rounds: int, changes: int, cluster: bool) -> None:
    missing = real_wireguard_available()
    if missing:
        print(f"cannot run: missing {missing} (root, /dev/net/tun, ip, wireguard-go, wg)")
        sys.exit(2)
    LOG.propagate = False
    logging.getLogger("roleserve").propagate = False
    checks: dict[str, bool] = {}
    tags: list[str] = []
    with tempfile.TemporaryDirectory(prefix="roleserve-bench-") as scratch:
        with namespace_pair("rsbn") as pair:
            tags.append(pair.a.interface[: -len("a")])  # interfaces and namespaces
            tags.append(pair.a.netns[: -len("a")])
            checks["(n1) both ways hold exactly the wanted peers"] = await many_peers(
                pair, peers, max(rounds, 5), Path(scratch)
            )
            checks["(n2) every transfer arrived whole"] = await throughput(
                pair, mib, rounds, Path(scratch)
            )
            if cluster:
                ok, prefix = await three_nodes(changes, Path(scratch))
                checks["(n3) every change reached n2 and n3"] = ok
                bridge = prefix[: -len("-")]
                tags += [prefix, f"{bridge}w", f"{bridge}:"]  # namespaces, interfaces, bridge
            checks["(n4) every change reached the interface"] = await update_latency(
                pair, changes, Path(scratch)
            )
        tags.append(scratch)  # the nodes' command lines
        left = leftovers(tags)
    checks["nothing of the run left behind"] = not left
    failed = [check for check, ok in checks.items() if not ok]
    for check in failed:
        print(f"FAILED: {check}")
    for thing in left:
        print(f"  left behind: {thing}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=1000, help="synthetic peers of (n1)")
    parser.add_argument("--mib", type=int, default=100, help="MiB per transfer of (n2)")
    parser.add_argument("--rounds", type=int, default=3, help="transfers of (n2), each way")
    parser.add_argument("--changes", type=int, default=200, help="prefix changes of (n3)")
    parser.add_argument(
        "--no-cluster", action="store_true", help="leave out (n3), the 3-node cluster"
    )
    parser.add_argument("--node", nargs=6, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.node:
        where, at, curator_id, netns, interface, mesh = options.node
        anyio.run(run_node, Path(where), at, curator_id, netns, interface, mesh, backend="asyncio")
    else:
        anyio.run(
            main,
            options.peers,
            options.mib,
            options.rounds,
            options.changes,
            not options.no_cluster,
            backend="asyncio",
        )
