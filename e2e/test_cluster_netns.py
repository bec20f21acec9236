"""``roleserve cluster up --netns`` as an operator runs it (root): three nodes, each in a
network namespace of its own at an address of 198.18.0.0/15, joined to a bridge on the
host, reached by ``ctl`` from the host; ``cluster down`` leaves no namespace, veth or
bridge behind.

Then the clusternet mesh between them, read from the host (``wg show <interface> dump``
reaches each node's wireguard-go by its UAPI socket, ``ip -n`` each namespace): every node
has a prefix of its own and the other two as peers; TCP between two nodes' prefix addresses
travels inside WireGuard (and cannot without the peer); wireguard-go killed comes back
configured; an address removed by hand comes back with its route; a decommissioned node's
peer leaves the others.

One cluster (``netns_cluster``, made by ``netns_kit.netns_cluster_up``) serves the module:
forming it takes most of its time. Its nodes reconcile their interfaces every
``RECONCILE_INTERVAL`` seconds (5, not the default 60), so what a test removes by hand
comes back quickly. The decommission test takes node 3 out of the mesh for good, so it
comes after the other mesh tests; the last test takes the cluster down.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import json
import operator
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from roleserve_core.localcluster import default_roles, netns
from roleserve_core.testing import poll_until, run_ctl
from roleserve_kubernetes.cri import NETWORK_READY, CriClient, runtime_ready
from roleserve_kubernetes.image import BUSYBOX_IMAGE
from roleserve_kubernetes.proto import cri_pb2

from .netns_kit import (
    LISTEN_PORT,
    TIMEOUT,
    MeshNode,
    NetnsCluster,
    mesh_nodes,
    netns_cluster_up,
    roleserve,
    run,
    status,
    wait_for,
)

RECONCILE_INTERVAL = 5
MESH_CONFIG = f"""
[plugins.clusternet]
reconcile_interval = {RECONCILE_INTERVAL}
"""
"""Added to the e2e roleserve.toml of this module's nodes (``cluster up`` adds each node's
own interface name under the same header)."""


@pytest.fixture(scope="module")
def netns_cluster(
    components: None, node_config: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NetnsCluster]:
    """Three nodes made by ``cluster up --netns --detach`` (with the e2e roleserve.toml
    and ``MESH_CONFIG``)."""
    with netns_cluster_up(
        tmp_path_factory.mktemp("netns") / "cluster", node_config + MESH_CONFIG
    ) as made:
        yield made


def test_each_node_runs_in_its_own_namespace_at_its_own_address(
    netns_cluster: NetnsCluster,
) -> None:
    plan = netns_cluster.plan
    nodes = status(netns_cluster.directory)
    assert [node["node"] for node in nodes] == ["n1", "n2", "n3"]
    for index, node in enumerate(nodes, start=1):
        assert (node["address"], node["namespace"]) == (
            str(plan.address(index)),
            plan.namespace(index),
        )
        known = node["cluster"]
        assert (known["state"], known["health"]) == ("UP", "HEALTHY"), node
        assert known["address"] == str(plan.address(index))  # what the node itself reports
        assert set(known["roles"]) == set(default_roles(index, 3)), node
        # The node process (not a wrapper) is in the namespace: nsenter execs it, and
        # leaves it the host's mounts (runc needs the cgroup file systems).
        inside = os.stat(f"/proc/{node['pid']}/ns/net").st_ino
        assert inside == os.stat(f"/run/netns/{plan.namespace(index)}").st_ino
        mounts = os.stat(f"/proc/{node['pid']}/ns/mnt").st_ino
        assert mounts == os.stat("/proc/self/ns/mnt").st_ino
        assert "node" in Path(f"/proc/{node['pid']}/cmdline").read_bytes().decode().split("\0")
    assert f"bridge {plan.bridge} at {plan.host_address}/24" in netns_cluster.made


def test_ctl_on_the_host_reaches_every_node(netns_cluster: NetnsCluster) -> None:
    """Each node's curator, as the endpoint of ``ctl leader``, and each node's own
    NodeManagement service (``ctl tree``), through the bridge."""
    env = {"ROLESERVE_CREDENTIALS": str(netns_cluster.directory / "owner")}
    nodes = status(netns_cluster.directory)
    for node in nodes:
        leader = roleserve("ctl", "--endpoint", node["address"], "leader", env=env)
        assert leader.returncode == 0, leader.stderr
        tree = roleserve("ctl", "tree", node["cluster"]["id"], "--json", env=env)
        assert tree.returncode == 0, tree.stderr
        assert json.loads(tree.stdout)


def test_up_without_netns_on_it_is_refused(netns_cluster: NetnsCluster) -> None:
    again = roleserve("cluster", "up", "--detach", "--dir", str(netns_cluster.directory))
    assert again.returncode == 1
    assert "runs in network namespaces (--netns); run `cluster up` with --netns" in again.stderr
    assert all(node["pid"] is not None for node in status(netns_cluster.directory))


# -- the clusternet mesh -------------------------------------------------------------


@dataclass(frozen=True)
class WgPeer:
    endpoint: str
    allowed_ips: frozenset[str]
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True)
class WgDevice:
    public_key: str
    listen_port: int
    peers: dict[str, WgPeer]

    def configured(self) -> dict[str, tuple[str, frozenset[str]]]:
        """Each peer's endpoint and allowed IPs, by key."""
        return {key: (peer.endpoint, peer.allowed_ips) for key, peer in self.peers.items()}


def wg_dump(interface: str) -> WgDevice:
    """``wg show <interface> dump`` (from the host: the UAPI socket is found by name)."""
    first, *rest = run("wg", "show", interface, "dump").splitlines()
    _private, public_key, port, _fwmark = first.split("\t")
    peers = {}
    for line in rest:
        key, _psk, endpoint, allowed, _handshake, rx, tx, _keepalive = line.split("\t")
        ips = frozenset(allowed.split(",")) if allowed != "(none)" else frozenset()
        peers[key] = WgPeer(endpoint, ips, int(rx), int(tx))
    return WgDevice(public_key, int(port), peers)


def wanted_peers(node: MeshNode, mesh: list[MeshNode]) -> dict[str, tuple[str, frozenset[str]]]:
    """``node``'s peers as they should be: every other node of ``mesh``, at its endpoint,
    with its announced prefixes."""
    return {
        other.public_key: (other.endpoint, frozenset(other.announced))
        for other in mesh
        if other is not node
    }


def interface_addresses(node: MeshNode) -> list[str]:
    shown = run("ip", "-n", node.namespace, "-o", "-4", "addr", "show", "dev", node.interface)
    return [line.split()[3] for line in shown.splitlines()]


def wait_for_mesh(cluster: NetnsCluster, count: int = 3) -> list[MeshNode]:
    """The ``count`` UP nodes, once every one has a prefix, has announced it, and has every
    other as a peer as it should be."""
    mesh = wait_for(
        f"{count} UP nodes with a prefix and a key",
        lambda: mesh_nodes(cluster),
        lambda nodes: len(nodes) == count,
    )
    for node in mesh:
        wait_for_peers(node, wanted_peers(node, mesh))
    return mesh


def wait_for_peers(
    node: MeshNode, wanted: dict[str, tuple[str, frozenset[str]]], timeout: float = 30.0
) -> None:
    """Until ``node``'s interface has exactly the peers ``wanted`` (endpoints, allowed IPs)."""
    wait_for(
        f"{node.interface}'s peers",
        lambda: wg_dump(node.interface).configured(),
        lambda peers: peers == wanted,
        timeout=timeout,
    )


LISTENER = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
server.settimeout(60)
print(server.getsockname()[1], flush=True)
connection, peer = server.accept()
connection.settimeout(60)
received = 0
while chunk := connection.recv(65536):
    received += len(chunk)
connection.sendall(f"{peer[0]} {received}".encode())
connection.close()
"""
"""Listens on argv[1], says its port, takes one connection; answers with the peer's address
and the number of bytes it received."""

CLIENT = """
import socket, sys
address, port, size, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
try:
    connection = socket.create_connection((address, port), timeout=timeout)
except OSError as error:
    sys.exit(f"no connection: {error!r}")
with connection:
    connection.sendall(bytes(size))
    connection.shutdown(socket.SHUT_WR)
    reply = b""
    while chunk := connection.recv(65536):
        reply += chunk
print(reply.decode())
"""
"""Connects to argv[1]:argv[2] (from whatever address the node's routes give it), sends
argv[3] bytes, prints the answer; says "no connection: ..." if it cannot connect within
argv[4] seconds."""


def tcp_transfer(
    server: MeshNode, client: MeshNode, size: int, timeout: float = 10.0
) -> tuple[str, int] | None:
    """``size`` bytes over TCP from ``client``'s namespace to a listener on ``server``'s
    mesh address: the client's address as the listener saw it and the bytes it received,
    or None if the client could not connect within ``timeout`` seconds (its packets
    dropped); any other failure (refused, unreachable) fails."""
    with subprocess.Popen(
        ["ip", "netns", "exec", server.namespace, sys.executable, "-c", LISTENER,
         str(server.address)],
        stdout=subprocess.PIPE,
        text=True,
    ) as listener:  # fmt: skip
        try:
            assert listener.stdout is not None
            port = listener.stdout.readline().strip()
            assert port, "the listener did not start"
            done = subprocess.run(
                ["ip", "netns", "exec", client.namespace, sys.executable, "-c", CLIENT,
                 str(server.address), port, str(size), str(timeout)],
                capture_output=True, text=True, timeout=timeout + 30, check=False,
            )  # fmt: skip
            if done.stderr.startswith("no connection: TimeoutError"):
                return None  # dropped, not refused
            assert done.returncode == 0, done.stderr
            peer, received = done.stdout.split()
            return peer, int(received)
        finally:
            listener.kill()


def clusternet_summary(node: MeshNode, peers: int) -> str:
    """The ``repr`` of ``node``'s ``clusternet_status`` with ``peers`` peers, each with a
    handshake."""
    return (
        f"ClusternetStatus({node.interface} port {LISTEN_PORT}, key {node.public_key[:8]}…, "
        f"announcing {', '.join(node.expected_announced)}; {peers} peers, {peers} with a "
        "handshake)"
    )


def clusternet_status(cluster: NetnsCluster, node: MeshNode) -> str | None:
    """The node's value ``clusternet_status``, as ``ctl values`` shows it."""
    shown = run_ctl(cluster.credentials, "values", node.id, "--json", timeout=TIMEOUT)
    assert shown.returncode == 0, shown.stderr
    [value] = [value for value in json.loads(shown.stdout) if value["name"] == "clusternet_status"]
    current: str | None = value["current"]
    return current


def test_every_node_has_a_prefix_of_its_own_and_the_others_as_peers(
    netns_cluster: NetnsCluster,
) -> None:
    mesh = wait_for_mesh(netns_cluster)
    assert [node.index for node in mesh] == [1, 2, 3]
    assert len({node.prefix for node in mesh}) == 3
    for node in mesh:
        assert node.prefix.subnet_of(netns_cluster.network), node  # type: ignore[arg-type]
        assert node.announced == node.expected_announced, node
        device = wg_dump(node.interface)
        assert (device.public_key, device.listen_port) == (node.public_key, LISTEN_PORT)
        assert device.configured() == wanted_peers(node, mesh)
        assert interface_addresses(node) == [f"{node.address}/32"]
        route = cluster_route(netns_cluster, node)
        assert f"dev {node.interface} " in route, route
    # No persistent keepalive (the default, as Monogon's): a session between two peers
    # starts with the first packet one sends the other. Some bytes between every pair:
    for server, client in itertools.combinations(mesh, 2):
        assert tcp_transfer(server, client, 1024) == (str(client.address), 1024)
    for node in mesh:
        # The node's own view: its value clusternet_status, as ctl values shows it.
        wait_for(
            f"node {node.index}'s clusternet_status",
            functools.partial(clusternet_status, netns_cluster, node),
            functools.partial(operator.eq, clusternet_summary(node, peers=2)),
            timeout=RECONCILE_INTERVAL + 10,
        )


def test_tcp_between_two_nodes_travels_inside_wireguard(netns_cluster: NetnsCluster) -> None:
    """From node 2 to a listener on node 1's mesh address, from node 2's: node 1's counters
    of its peer node 2 rise by at least the bytes sent. Without that peer (removed with
    ``wg``), no connection: nothing goes around the tunnel. The reconcile puts it back
    within one interval, and TCP works again."""
    mesh = wait_for_mesh(netns_cluster)
    a, b = mesh[0], mesh[1]
    size = 64 * 1024
    before = wg_dump(a.interface).peers[b.public_key]
    assert tcp_transfer(a, b, size) == (str(b.address), size)
    after = wg_dump(a.interface).peers[b.public_key]
    assert after.rx_bytes - before.rx_bytes >= size, (before, after)

    for _attempt in range(3):
        run("wg", "set", a.interface, "peer", b.public_key, "remove")
        removed = wg_dump(a.interface)
        assert b.public_key not in removed.peers
        refused = tcp_transfer(a, b, 1024, timeout=2.0)
        if refused is None:
            break
        # It got through: only right if the reconcile put the peer back meanwhile.
        assert b.public_key in wg_dump(a.interface).peers, refused
    else:
        pytest.fail("the reconcile put the peer back before every attempt could fail")
    wait_for_peers(a, wanted_peers(a, mesh), timeout=RECONCILE_INTERVAL + 5)  # one reconcile
    again = wait_for("TCP from node 2 to node 1 again", lambda: tcp_transfer(a, b, size))
    assert again == (str(b.address), size)


def wireguard_go(node: MeshNode) -> list[int]:
    """The pids of the wireguard-go running ``node``'s interface."""
    found = subprocess.run(
        ["pgrep", "-f", f"wireguard-go.* {node.interface}$"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return [int(pid) for pid in found.stdout.split()]


def test_wireguard_go_killed_comes_back_configured(netns_cluster: NetnsCluster) -> None:
    mesh = wait_for_mesh(netns_cluster)
    a, b = mesh[0], mesh[1]
    [pid] = wireguard_go(a)
    os.kill(pid, signal.SIGKILL)
    [restarted] = wait_for(
        f"a new wireguard-go for {a.interface}",
        lambda: wireguard_go(a),
        lambda pids: len(pids) == 1 and pids[0] != pid,
    )
    wait_for(
        f"{a.interface} configured again",
        lambda: (wg_dump(a.interface).configured(), interface_addresses(a)),
        lambda seen: seen == (wanted_peers(a, mesh), [f"{a.address}/32"]),
    )
    assert wg_dump(a.interface).public_key == a.public_key  # the same key, from its file
    again = wait_for("TCP from node 2 to node 1 again", lambda: tcp_transfer(a, b, 1024))
    assert again == (str(b.address), 1024)
    assert wireguard_go(a) == [restarted]


def cluster_route(cluster: NetnsCluster, node: MeshNode) -> str:
    """The route of the cluster's network in ``node``'s namespace."""
    return run("ip", "-n", node.namespace, "route", "show", str(cluster.network))


def test_the_address_removed_by_hand_comes_back_with_the_route(
    netns_cluster: NetnsCluster,
) -> None:
    """Removing an interface's last IPv4 address makes the kernel drop the routes through
    it: the reconcile puts back the address and the cluster network's route."""
    mesh = wait_for_mesh(netns_cluster)
    a, b = mesh[0], mesh[1]
    run("ip", "-n", a.namespace, "addr", "del", f"{a.address}/32", "dev", a.interface)
    assert f"dev {a.interface} " not in cluster_route(netns_cluster, a)  # the kernel's doing
    wait_for(
        f"{a.interface}'s address and route back within one reconcile",
        lambda: (interface_addresses(a), cluster_route(netns_cluster, a)),
        lambda seen: seen[0] == [f"{a.address}/32"] and f"dev {a.interface} " in seen[1],
        timeout=RECONCILE_INTERVAL + 5,
    )
    again = wait_for("TCP from node 2 to node 1 again", lambda: tcp_transfer(a, b, 1024))
    assert again == (str(b.address), 1024)


# -- pods on the mesh ----------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    """A pod sandbox with one container, started through a node's CRI."""

    sandbox_id: str
    container_id: str
    address: ipaddress.IPv4Address
    log: Path
    """The container's CRI log file."""

    def lines(self) -> list[str]:
        """The text of its log's lines (``<time> <stream> <F|P> <text>``)."""
        text = self.log.read_text() if self.log.exists() else ""
        return [line.split(" ", 3)[3] for line in text.splitlines() if line.count(" ") >= 3]


CONTAINERD = "root.role.kubernetes_worker.containerd"


def runnable(cluster: NetnsCluster, node: MeshNode, dn: str) -> dict[str, Any]:
    """The runnable ``dn`` of ``node``, as ``ctl tree --json`` shows it."""
    shown = run_ctl(cluster.credentials, "tree", node.id, dn, "--json", timeout=TIMEOUT)
    assert shown.returncode == 0, shown.stderr
    [found] = [entry for entry in json.loads(shown.stdout) if entry["dn"] == dn]
    return found


def node_cri(cluster: NetnsCluster, node: MeshNode) -> CriClient:
    """A CRI client of ``node``'s containerd."""
    return CriClient(cluster.containerd_socket(node.index))


async def start_pod(cri: CriClient, name: str, logs: Path, *command: str) -> Pod:
    """A sandbox and a container of the busybox image running ``command``, once the node's
    CRI says its network is ready (the CNI configuration of its pod prefix written)."""
    await poll_until("NetworkReady", cri.status, lambda s: runtime_ready(s, NETWORK_READY))
    sandbox = cri_pb2.PodSandboxConfig(
        metadata=cri_pb2.PodSandboxMetadata(name=name, uid=f"uid-{name}", namespace="e2e"),
        hostname=name,
        log_directory=str(logs / name),
    )
    container = cri_pb2.ContainerConfig(
        metadata=cri_pb2.ContainerMetadata(name=name),
        image=cri_pb2.ImageSpec(image=BUSYBOX_IMAGE),
        command=list(command),
        log_path=f"{name}.log",
    )
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    container_id = await cri.create_container(sandbox_id, container, sandbox)
    await cri.start_container(container_id)
    address = (await cri.pod_sandbox_status(sandbox_id)).network.ip
    log = logs / name / f"{name}.log"
    return Pod(sandbox_id, container_id, ipaddress.IPv4Address(address), log)


async def remove_pod(cri: CriClient, pod: Pod) -> None:
    await cri.stop_pod_sandbox(pod.sandbox_id)
    await cri.remove_pod_sandbox(pod.sandbox_id)


def test_containers_start_and_pods_reach_each_other_across_the_mesh(
    netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """A pod on node 1 and one on node 2, through each node's CRI: each container starts
    (runc finds the cgroup file systems: the node runs in the host's mount namespace, only
    its network its own), in a cgroup of its own, with an address of its node's pod
    prefix; node 2's pod pings node 1's through WireGuard (node 1's counters of its peer
    node 2 rise). A node run by ``ip netns exec``
    had a /sys without cgroups, where no container started at all."""
    mesh = wait_for_mesh(netns_cluster)
    a, b = mesh[0], mesh[1]
    for node in (a, b):  # HEALTHY: it has started a container of its own (runtimecheck)
        wait_for(
            f"node {node.index}'s containerd HEALTHY",
            functools.partial(runnable, netns_cluster, node, CONTAINERD),
            lambda shown: shown["state"] == "HEALTHY",
            timeout=60.0,
        )

    async def pods() -> tuple[Pod, Pod, cri_pb2.ContainerStatus]:
        async with node_cri(netns_cluster, a) as cri_a, node_cri(netns_cluster, b) as cri_b:
            server = await start_pod(
                cri_a, "server", tmp_path, "/bin/sh", "-c", "cat /proc/self/cgroup; sleep 600"
            )
            try:
                await poll_until(
                    "the server container running",
                    lambda: cri_a.container_status(server.container_id),
                    lambda s: s.state == cri_pb2.CONTAINER_RUNNING,
                    timeout=TIMEOUT,
                )
                client = await start_pod(
                    cri_b, "client", tmp_path, "/bin/ping", "-c", "3", "-w", "30",
                    str(server.address),
                )  # fmt: skip
                try:
                    pinged = await poll_until(
                        "the client container to exit",
                        lambda: cri_b.container_status(client.container_id),
                        lambda s: s.state == cri_pb2.CONTAINER_EXITED,
                        timeout=TIMEOUT,
                    )
                finally:
                    await remove_pod(cri_b, client)
            finally:
                await remove_pod(cri_a, server)
        return server, client, pinged

    before = wg_dump(a.interface).peers[b.public_key]
    server, client, pinged = anyio.run(pods)
    after = wg_dump(a.interface).peers[b.public_key]
    assert after.rx_bytes - before.rx_bytes >= 3 * 84, (before, after)  # 3 pings' packets
    assert server.address in a.pod_network, (server, a.pod_network)
    assert client.address in b.pod_network, (client, b.pod_network)
    cgroups = server.lines()
    assert any(server.container_id in line for line in cgroups), cgroups
    assert pinged.exit_code == 0, client.lines()
    assert "3 packets transmitted, 3 packets received" in "\n".join(client.lines())


def test_a_decommissioned_node_leaves_the_others_peers(netns_cluster: NetnsCluster) -> None:
    """Node 3 loses its consensus roles and is decommissioned (as ``docs/ctl.md`` says); the
    leader refuses it from then on, so it stops, out of the mesh. After the other mesh tests:
    node 3 never comes back."""
    mesh = wait_for_mesh(netns_cluster)
    third = mesh[2]
    for role in ("kubernetes_controller", "consensus_member"):
        unset = run_ctl(
            netns_cluster.credentials, "roles", "unset", third.id, role, timeout=TIMEOUT
        )
        assert unset.returncode == 0, unset.stderr
    gone = run_ctl(netns_cluster.credentials, "decommission", third.id, "--yes", timeout=TIMEOUT)
    assert gone.returncode == 0, gone.stderr
    assert f"decommissioned {third.id}" in gone.stdout
    remaining = mesh[:2]
    listed = run_ctl(netns_cluster.credentials, "nodes", "--json", timeout=TIMEOUT)
    assert listed.returncode == 0, listed.stderr
    [record] = [node for node in json.loads(listed.stdout) if node["id"] == third.id]
    assert (record["state"], record["cluster_prefix"]) == ("DECOMMISSIONED", None), record
    for node in remaining:
        wait_for_peers(node, wanted_peers(node, remaining))
        wait_for(
            f"node {node.index}'s clusternet_status",
            functools.partial(clusternet_status, netns_cluster, node),
            functools.partial(operator.eq, clusternet_summary(node, peers=1)),
            timeout=RECONCILE_INTERVAL + 10,
        )
    assert tcp_transfer(mesh[0], mesh[1], 1024) == (str(mesh[1].address), 1024)


def test_down_leaves_no_namespace_veth_or_bridge(netns_cluster: NetnsCluster) -> None:
    """Last: it takes the module's cluster down."""
    plan = netns_cluster.plan
    assert netns.leftovers(plan)
    down = roleserve("cluster", "down", "--dir", str(netns_cluster.directory))
    assert down.returncode == 0, down.stderr
    assert "removed the network: " in down.stdout
    assert not netns.leftovers(plan)
    assert [node["pid"] for node in status(netns_cluster.directory)] == [None] * 3
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert plan.prefix not in listed.stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert plan.bridge not in links.stdout
