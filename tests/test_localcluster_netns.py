"""``cluster up --netns``: the names and addresses a cluster's network gets (pure), the
mode a cluster directory records, and, as root, the real namespaces, veths and bridge:
TCP between them, their removal, and the cleaning of a killed run's leftovers."""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from roleserve_core.localcluster import LocalCluster, LocalClusterError, LocalNode, netns
from roleserve_core.localcluster.netns import NETNS_RANGE, NetnsPlan, subnet_for
from roleserve_core.testing import require_real

SUBNET = ipaddress.IPv4Network("198.18.7.0/24")


# -- planning (pure) ---------------------------------------------------------------------


def test_a_plan_names_everything_after_its_subnet() -> None:
    plan = NetnsPlan(SUBNET, 3)
    assert plan.key == 7
    assert plan.bridge == "rsnet7"
    assert plan.host_address == ipaddress.IPv4Address("198.18.7.1")
    assert [str(plan.address(i)) for i in (1, 2, 3)] == [
        "198.18.7.11",
        "198.18.7.12",
        "198.18.7.13",
    ]
    assert [plan.namespace(i) for i in (1, 3)] == ["rsnet7-n1", "rsnet7-n3"]
    assert [plan.veth(i) for i in (1, 3)] == ["rsnet7-1", "rsnet7-3"]
    assert netns.in_namespace("rsnet7-n1", ["true"]) == [
        "nsenter",
        "--net=/var/run/netns/rsnet7-n1",
        "--",
        "true",
    ]


def test_names_fit_the_kernels_limit_in_the_whole_range() -> None:
    last = NetnsPlan(ipaddress.IPv4Network("198.19.255.0/24"), netns.MAX_NODES)
    assert last.key == 511
    assert len(last.veth(netns.MAX_NODES)) <= 15
    assert len(last.bridge) <= 15
    assert last.address(netns.MAX_NODES) == ipaddress.IPv4Address("198.19.255.254")


def test_a_plan_refuses_what_is_not_a_24_of_the_range() -> None:
    with pytest.raises(ValueError, match=re.escape("not a /24 of 198.18.0.0/15")):
        NetnsPlan(ipaddress.IPv4Network("10.0.0.0/24"), 1)
    with pytest.raises(ValueError, match="not a /24"):
        NetnsPlan(ipaddress.IPv4Network("198.18.0.0/23"), 1)
    with pytest.raises(ValueError, match="1 to 244 nodes, not 245"):
        NetnsPlan(SUBNET, 245)


def test_the_first_address_gives_back_the_plan() -> None:
    plan = NetnsPlan.from_first_address(ipaddress.IPv4Address("198.18.7.11"), 2)
    assert plan == NetnsPlan(SUBNET, 2)
    with pytest.raises(ValueError, match=re.escape("198.18.7.12 is not node 1's address")):
        NetnsPlan.from_first_address(ipaddress.IPv4Address("198.18.7.12"), 2)


def test_each_directory_has_its_own_subnet_in_the_range(tmp_path: Path) -> None:
    subnets = {subnet_for(tmp_path / f"c{i}") for i in range(20)}
    assert all(subnet.subnet_of(NETNS_RANGE) and subnet.prefixlen == 24 for subnet in subnets)
    assert len(subnets) > 15  # a hash: rarely the same
    assert subnet_for(tmp_path / "c1") == subnet_for(tmp_path / "c1")


# -- the mode a cluster directory records ---------------------------------------------------


def test_a_netns_cluster_takes_its_addresses_from_its_directory(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 2, netns=True)
    plan = NetnsPlan(subnet_for(tmp_path), 2)
    assert cluster.network == plan
    assert [(node.address, node.namespace) for node in cluster.nodes] == [
        (plan.address(1), plan.namespace(1)),
        (plan.address(2), plan.namespace(2)),
    ]
    assert LocalCluster(tmp_path, 2).network is None  # nothing recorded yet: loopback


def test_a_recorded_mode_is_followed_or_a_different_one_refused(tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir()
    (tmp_path / "first-address").write_text("198.18.7.11\n")
    existing = LocalCluster.existing(tmp_path)
    assert existing.network == NetnsPlan(SUBNET, 1)
    assert existing.nodes[0].namespace == "rsnet7-n1"
    with pytest.raises(LocalClusterError, match=r"runs in network namespaces \(--netns\); run"):
        LocalCluster(tmp_path, 1, netns=False)
    (tmp_path / "first-address").write_text("127.0.0.11\n")
    assert LocalCluster.existing(tmp_path).network is None
    with pytest.raises(LocalClusterError, match="runs on loopback; run `cluster up` without"):
        LocalCluster(tmp_path, 1, netns=True)


def test_netns_refuses_a_first_address(tmp_path: Path) -> None:
    with pytest.raises(LocalClusterError, match="--first-address is for loopback clusters"):
        LocalCluster(tmp_path, 1, netns=True, first_address=ipaddress.IPv4Address("127.0.1.11"))


def test_without_root_netns_refuses_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    cluster = LocalCluster(tmp_path / "c", 1, netns=True)
    with pytest.raises(LocalClusterError) as refused:
        anyio.run(cluster.up)
    assert str(refused.value) == "--netns needs root: it creates network namespaces"
    assert not (tmp_path / "c").exists()
    anyio.run(cluster.down)  # nothing to remove, and no error for it


def test_netns_refuses_a_cluster_the_kernels_arp_table_cannot_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ARP table is one for every namespace: 100 nodes (10,100 entries) against the
    default 1,024 overflowed it, and some nodes could not reach the new leader for good.
    ``up`` refuses before it makes anything, naming the setting and a value that fits."""
    import anyio

    limit = tmp_path / "gc_thresh3"
    limit.write_text("1024\n")
    monkeypatch.setattr(netns, "NEIGHBOUR_LIMIT", limit)
    monkeypatch.setattr(netns, "unsupported", lambda: None)
    assert netns.neighbour_shortage(31) is None  # 992 entries
    cluster = LocalCluster(tmp_path / "c", 32, netns=True)
    with pytest.raises(LocalClusterError) as refused:
        anyio.run(cluster.up)
    assert str(refused.value) == (
        f"32 nodes in network namespaces need up to 1056 ARP entries, and the kernel keeps "
        f"at most 1024 for all namespaces ({limit}): some nodes would not reach others. "
        "Raise it: sysctl -w net.ipv4.neigh.default.gc_thresh3=2112 "
        "net.ipv4.neigh.default.gc_thresh2=1056"
    )
    assert not (tmp_path / "c").exists()


def test_without_nsenter_netns_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node runs under nsenter (util-linux), not ip netns exec (see netns.py)."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "nsenter" else name)
    assert netns.unsupported() == (
        "--netns needs util-linux's `nsenter` to run nodes in namespaces "
        "(apt-get install util-linux)"
    )


def test_without_pyroute2_netns_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "pyroute2" else found(name)
    )
    assert netns.unsupported() == "--netns needs pyroute2: install roleserve-core[netns]"


# -- real namespaces (root) -----------------------------------------------------------------


def _netns_available() -> bool:
    return netns.unsupported() is None


@pytest.fixture
def plan(tmp_path: Path) -> Iterator[NetnsPlan]:
    """A two-node plan in a /24 no other cluster of this machine uses; removed after."""
    require_real(
        "network namespaces (root, iproute2, nsenter, pyroute2)",
        _netns_available(),
        f"run as root; {netns.unsupported()}",
    )
    taken = _host_subnets()
    start = NetnsPlan(subnet_for(tmp_path), 1).key
    for offset in range(512):
        key = (start + offset) % 512
        subnet = ipaddress.IPv4Network((int(NETNS_RANGE.network_address) + (key << 8), 24))
        candidate = NetnsPlan(subnet, 2)
        if subnet not in taken and not netns.leftovers(candidate):
            break
    try:
        yield candidate
    finally:
        netns.remove(candidate)


def _host_subnets() -> set[ipaddress.IPv4Network]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return {
            ipaddress.IPv4Network(f"{entry.get('address')}/24", strict=False)
            for entry in ipr.get_addr(family=2)
        }


LISTENER = """
import socket, sys
server = socket.socket()
server.bind((sys.argv[1], 0))
server.listen()
print(server.getsockname()[1], flush=True)
connection, peer = server.accept()
connection.sendall(peer[0].encode())
connection.close()
"""
CONNECT = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as c:
    print(c.recv(100).decode())
"""


@contextlib.contextmanager
def _listening_in(namespace: str, address: ipaddress.IPv4Address) -> Iterator[int]:
    """A one-connection TCP listener in ``namespace`` at ``address``: its port. It sends
    the address the connection came from, and must have had one at the end."""
    with subprocess.Popen(
        netns.in_namespace(namespace, [sys.executable, "-c", LISTENER, str(address)]),
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        yield int(process.stdout.readline())
        assert process.wait(timeout=10) == 0


def test_two_namespaces_reach_each_other_and_the_host_reaches_both(
    plan: NetnsPlan, tmp_path: Path
) -> None:
    netns.create(plan, tmp_path)
    found = netns.leftovers(plan)
    assert found.namespaces == (plan.namespace(1), plan.namespace(2))
    assert set(found.links) == {plan.bridge, plan.veth(1), plan.veth(2)}
    assert netns.owner(plan) == str(tmp_path)

    # from namespace 1 to node 2's address
    with _listening_in(plan.namespace(2), plan.address(2)) as port:
        answer = subprocess.run(
            netns.in_namespace(
                plan.namespace(1),
                [sys.executable, "-c", CONNECT, str(plan.address(2)), str(port)],
            ),
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    assert answer.stdout.strip() == str(plan.address(1))

    # from the host to each node, through the bridge
    for index in (1, 2):
        with (
            _listening_in(plan.namespace(index), plan.address(index)) as port,
            socket.create_connection((str(plan.address(index)), port), timeout=5) as client,
        ):
            assert client.recv(100).decode() == str(plan.host_address)

    netns.create(plan, tmp_path)  # again: nothing changes, nothing fails
    assert netns.leftovers(plan) == found

    assert netns.remove(plan) == found
    assert not netns.leftovers(plan)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert plan.prefix not in listed.stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert plan.bridge not in links.stdout


def test_another_clusters_bridge_is_refused_not_removed(plan: NetnsPlan, tmp_path: Path) -> None:
    other = tmp_path / "other"
    netns.create(plan, other)
    with pytest.raises(netns.NetnsError, match="its directory is gone: remove its network"):
        netns.create(plan, tmp_path / "mine")
    other.mkdir()
    with pytest.raises(netns.NetnsError) as refused:
        netns.create(plan, tmp_path / "mine")
    assert str(refused.value) == (
        f"{plan.subnet} is taken by the cluster in {other} (bridge {plan.bridge}); "
        f"stop it (`cluster down --dir {other}`), or use another --dir"
    )
    assert netns.owner(plan) == str(other)
    assert netns.leftovers(plan).namespaces == (plan.namespace(1), plan.namespace(2))


def test_a_killed_runs_leftovers_are_cleaned_by_the_next_up(
    plan: NetnsPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed run leaves its namespaces, veths and bridge; the next ``up``, with no node
    running, removes them, says so in one line, and makes the network afresh. No node is
    started here: the network is ``up``'s first step, and node 1 "exiting" at once (its
    ``start`` does nothing) ends ``up`` right after it."""
    import anyio

    directory = tmp_path / "cluster"
    directory.mkdir()
    (directory / "first-address").write_text(f"{plan.address(1)}\n")
    netns.create(NetnsPlan(plan.subnet, 3), directory)  # a bigger run, killed
    lines: list[str] = []
    cluster = LocalCluster(directory, 2, netns=True, progress=lines.append)
    monkeypatch.setattr(LocalNode, "start", lambda *_, **__: 0)

    with pytest.raises(LocalClusterError, match="node 1 exited"):
        anyio.run(cluster.up)

    assert [line for line in lines if line.startswith("removing")] == [
        f"removing what a killed run left: {plan.namespace(1)}, {plan.namespace(2)}, "
        f"{plan.namespace(3)}, {plan.bridge}, {plan.veth(1)}, {plan.veth(2)}, {plan.veth(3)}"
    ]
    after = netns.leftovers(plan)
    assert after.namespaces == (plan.namespace(1), plan.namespace(2))
    assert set(after.links) == {plan.bridge, plan.veth(1), plan.veth(2)}
    anyio.run(cluster.down)
    assert not netns.leftovers(plan)
    assert lines[-1].startswith("removed the network: ")


def test_up_on_another_clusters_network_refuses_and_down_leaves_it(
    plan: NetnsPlan, tmp_path: Path
) -> None:
    """The refusal comes from the process that makes the network, as one line."""
    import anyio

    other, mine = tmp_path / "other", tmp_path / "mine"
    other.mkdir()
    mine.mkdir()
    netns.create(plan, other)
    (mine / "first-address").write_text(f"{plan.address(1)}\n")
    lines: list[str] = []
    cluster = LocalCluster(mine, 2, netns=True, progress=lines.append)
    with pytest.raises(netns.NetnsError) as refused:
        anyio.run(cluster.up)
    assert str(refused.value).startswith(f"{plan.subnet} is taken by the cluster in {other} ")
    anyio.run(cluster.down)
    assert lines[-1] == f"{plan.bridge} is the cluster's in {other}; left as it is"
    assert netns.owner(plan) == str(other)
    assert netns.leftovers(plan).namespaces == (plan.namespace(1), plan.namespace(2))


def test_a_subnet_the_host_uses_elsewhere_is_refused(plan: NetnsPlan, tmp_path: Path) -> None:
    """An address of the subnet on another interface of the host (here a veth of the
    test's own) would make the host's routes to the nodes ambiguous."""
    from pyroute2 import IPRoute

    name = f"{plan.prefix}x"  # the plan's prefix: the fixture removes it whatever happens
    with IPRoute() as ipr:
        ipr.link("add", ifname=name, kind="veth", peer={"ifname": f"{plan.prefix}y"})
        index = ipr.link_lookup(ifname=name)[0]
        ipr.addr("add", index=index, address=str(plan.address(9)), prefixlen=24)
    with pytest.raises(netns.NetnsError) as refused:
        netns.create(plan, tmp_path)
    assert str(refused.value) == (
        f"{plan.subnet} is in use on this host ({plan.address(9)} on {name}); use another --dir"
    )
    assert plan.bridge not in netns.leftovers(plan).links
