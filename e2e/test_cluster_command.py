"""``roleserve cluster up|status|down``, the README's run command, as an operator runs it:
real processes, on loopback addresses of the test's own.

The first tests each run a one-node cluster of their own. The others share one three-node
cluster (``three``), made by the command itself, that they stop and bring back; each leaves
it with every node running, UP and HEALTHY. The last but one grows it to four; the last
decommissions the fourth, which the leader then refuses: the node stops (exit 1), and so
does it again when started.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import grpc
import pytest

from roleserve_core.access import ClusterAccess
from roleserve_core.connection import find_leader
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.identity import NodeCredentials
from roleserve_core.localcluster import FIRST_ADDRESS, LocalCluster, default_roles
from roleserve_core.proto import common_pb2, curator_pb2, curator_pb2_grpc
from roleserve_core.rpc import secure_channel
from roleserve_core.testing import poll_until, run_ctl

T = TypeVar("T")
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

TIMEOUT = 120.0
"""Seconds a command may take: bootstrapping a one-node cluster takes a few."""
COMMAND = [sys.executable, "-m", "roleserve_core", "cluster"]
HOSTS_TIMEOUT = 60.0
"""Seconds for a change of the cluster's nodes to reach every node's hosts file."""


def cluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def status(directory: Path) -> list[dict[str, Any]]:
    shown = cluster("status", "--json", "--dir", str(directory))
    assert shown.returncode == 0, shown.stderr
    nodes: list[dict[str, Any]] = json.loads(shown.stdout)
    return nodes


def configured(directory: Path, node_config: str, nodes: int = 1) -> Path:
    """``directory`` with each node's roleserve.toml written first (``up`` keeps it):
    ``E2E_CONFIG``'s short lease, and no kube binaries: these tests are not Kubernetes'."""
    for index in range(1, nodes + 1):
        (directory / f"n{index}").mkdir(parents=True)
        (directory / f"n{index}" / "roleserve.toml").write_text(node_config)
    return directory


def test_up_detached_status_and_down(
    components: None, first_address: ipaddress.IPv4Address, tmp_path: Path, node_config: str
) -> None:
    directory, first = configured(tmp_path / "cluster", node_config), first_address
    up = cluster("up", "--nodes", "1", "--detach", "--dir", str(directory),
                 "--first-address", str(first))  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "the cluster is up: 1 node\n" in up.stdout
        owner = directory / "owner"
        assert f"operate it with: export ROLESERVE_CREDENTIALS={owner};" in up.stdout
        assert (directory / "first-address").read_text() == f"{first}\n"
        [node] = status(directory)
        assert node["address"] == str(first)
        assert node["cluster"]["state"] == "UP"
        assert node["cluster"]["health"] in ("HEALTHY", "UNKNOWN")
        assert node["cluster"]["leader"] is True
        moved = cluster("up", "--nodes", "1", "--detach", "--dir", str(directory),
                        "--first-address", str(FIRST_ADDRESS))  # fmt: skip
        assert moved.returncode == 1
        assert f"runs from {first}, not {FIRST_ADDRESS}" in moved.stderr
        [still] = status(directory)  # the refusal stopped nothing
        assert (still["pid"], still["cluster"]["state"]) == (node["pid"], "UP")
    finally:
        down = cluster("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert "every node stopped" in down.stdout
    [node] = status(directory)
    assert (node["pid"], node["cluster"]) == (None, None)


def test_up_in_the_foreground_stops_every_node_on_ctrl_c(
    components: None, first_address: ipaddress.IPv4Address, tmp_path: Path, node_config: str
) -> None:
    directory, first = configured(tmp_path / "cluster", node_config), first_address
    argv = [*COMMAND, "up", "--nodes", "1", "--dir", str(directory), "--first-address", str(first)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        # Without a terminal, the status table is printed once, when the cluster is up.
        for line in process.stdout:
            if line.startswith("n1 ") and " UP " in line:
                break
        else:
            pytest.fail(f"cluster up ended ({process.wait()}): {process.stderr.read()}")
        pid = status(directory)[0]["pid"]
        assert pid is not None
        process.send_signal(signal.SIGINT)
        rest, errors = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, errors
    assert rest.splitlines()[-1].endswith("every node stopped")
    assert not Path(f"/proc/{pid}").exists()


def test_kubernetes_workers_and_a_foreground_up_ended_by_cluster_down(
    components: None, first_address: ipaddress.IPv4Address, tmp_path: Path, node_config: str
) -> None:
    """``--kubernetes-workers 1``: node 1 only gets ``kubernetes_worker``, node 2 no role
    (one consensus member of two). The foreground ``up`` then ends by itself, exit 0, when
    ``cluster down`` from another terminal stopped its nodes: it once kept waiting."""
    directory = configured(tmp_path / "cluster", node_config, 2)
    argv = [*COMMAND, "up", "--nodes", "2", "--kubernetes-workers", "1", "--dir",
            str(directory), "--first-address", str(first_address)]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    said: list[str] = []
    try:
        for line in process.stdout:  # without a terminal, the table is printed once
            said.append(line)
            if line.startswith("n2 ") and " UP " in line:
                break
        else:
            pytest.fail(f"cluster up ended ({process.wait()}): {process.stderr.read()}")
        first, second = status(directory)
        assert set(first["cluster"]["roles"]) == set(default_roles(1, 2))
        assert not second["cluster"]["roles"], second  # no role at all
        assert not any("node 2: gets" in line for line in said), said
        down = cluster("down", "--dir", str(directory))
        assert down.returncode == 0, down.stderr
        rest, errors = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
        cluster("down", "--dir", str(directory))
    assert process.returncode == 0, errors
    assert rest.splitlines()[-1].endswith(" stopped by cluster down"), rest
    assert "every node stopped" not in rest


def test_a_one_node_cluster_stays_one_node_when_brought_back(
    components: None, first_address: ipaddress.IPv4Address, tmp_path: Path, node_config: str
) -> None:
    """Without --nodes, ``up`` keeps the size the directory records (it once took
    --nodes' default, 3, and added two consensus members)."""
    directory = configured(tmp_path / "cluster", node_config)
    made = cluster("up", "--nodes", "1", "--detach", "--dir", str(directory),
                   "--first-address", str(first_address))  # fmt: skip
    try:
        assert made.returncode == 0, made.stdout + made.stderr
        assert cluster("down", "--dir", str(directory)).returncode == 0
        again = cluster("up", "--detach", "--dir", str(directory))
        assert again.returncode == 0, again.stdout + again.stderr
        assert "the cluster is up: 1 node\n" in again.stdout
        assert "registering" not in again.stdout
        [node] = status(directory)
        assert node["cluster"]["state"] == "UP"
        assert not (directory / "n2").exists()
    finally:
        cluster("down", "--dir", str(directory))


# -- a three-node cluster, stopped and brought back --------------------------------------


@dataclass(frozen=True)
class Three:
    directory: Path
    up: list[str]
    """The command that made it, to run again."""
    made: str
    """What that command printed."""


@pytest.fixture(scope="module")
def three(
    components: None,
    module_first_address: ipaddress.IPv4Address,
    node_config: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Three]:
    """Three nodes made by ``cluster up --detach``, with a short election lease (each node's
    roleserve.toml is written first; ``up`` keeps what it finds)."""
    directory = configured(tmp_path_factory.mktemp("three") / "cluster", node_config, 3)
    first = str(module_first_address)
    up = ["up", "--nodes", "3", "--detach", "--dir", str(directory), "--first-address", first]
    made = cluster(*up)
    try:
        assert made.returncode == 0, made.stdout + made.stderr
        yield Three(directory, up, made.stdout)
    finally:
        cluster("down", "--dir", str(directory))


def argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def assert_up_with_roles(nodes: list[dict[str, Any]]) -> None:
    """Every node runs, UP and HEALTHY, with the roles ``up`` gave it."""
    assert [node["node"] for node in nodes] == [f"n{i}" for i in range(1, len(nodes) + 1)]
    for index, node in enumerate(nodes, start=1):
        assert node["pid"] is not None, node
        known = node["cluster"]
        assert (known["state"], known["health"]) == ("UP", "HEALTHY"), node
        assert set(known["roles"]) == set(default_roles(index, len(nodes))), node


def test_registering_nodes_get_the_ticket_outside_their_arguments(three: Three) -> None:
    nodes = status(three.directory)
    assert_up_with_roles(nodes)
    for node in nodes:
        words = argv(node["pid"])
        assert "node" in words, words  # the node process itself
        assert not any(word.startswith("rs1-") or word == "--register" for word in words)


BUILD_HINT = (
    "Kubernetes: no kube binaries found (no controller has kube-apiserver), so the nodes "
    "run containerd only; `./dev kube-binaries` builds them (about 9 minutes the first time)"
)


def test_without_kube_binaries_up_says_in_one_line_how_to_build_them(three: Three) -> None:
    """The nodes' roleserve.toml hides the kube binaries (``E2E_CONFIG``): ``up`` runs as
    before Kubernetes (no K8S column) and says, as a step before "the cluster is up" and
    under the table, what builds them and how long that takes."""
    lines = three.made.splitlines()
    said = [index for index, line in enumerate(lines) if line.endswith(BUILD_HINT)]
    up = next(index for index, line in enumerate(lines) if "the cluster is up: 3 nodes" in line)
    assert len(said) == 2, three.made
    assert said[0] < up < said[1]
    header = lines[up + 1]
    assert header.startswith("NODE ")
    assert header.split()[-1] == "HEARTBEAT"
    shown = cluster("status", "--dir", str(three.directory))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0].split()[-1] == "HEARTBEAT"


def hosts_entries(path: Path) -> dict[str, str]:
    """The hostsfile plugin's block in the hosts file ``path`` (between the two marker
    lines that name roleserve): node ID → address."""
    lines = path.read_text().splitlines()
    begin, end = [index for index, line in enumerate(lines) if "roleserve" in line][:2]
    entries = {}
    for line in lines[begin + 1 : end]:
        address, *names = line.split("#")[0].split() or [""]
        for name in names:
            entries[name] = address
    return entries


def wait_for_hosts(path: Path, wanted: dict[str, str]) -> None:
    """Until the block in ``path`` lists exactly ``wanted`` (node ID → address)."""

    async def look() -> dict[str, str]:
        return hosts_entries(path)

    what = f"{path} lists {sorted(wanted)}"
    anyio.run(lambda: poll_until(what, look, wanted.__eq__, timeout=HOSTS_TIMEOUT))


def node_addresses(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """Node ID → address, of the nodes ``status`` shows."""
    return {node["cluster"]["id"]: node["address"] for node in nodes}


def test_every_node_has_its_own_hosts_file_listing_every_node(three: Three) -> None:
    """Each node's hosts file is in its directory ([plugins.hostsfile] path, added to the
    roleserve.toml the fixture wrote, which keeps its own settings), and lists all three."""
    nodes = status(three.directory)
    assert f"hosts files: {three.directory}/n<i>/hosts\n" in three.made
    for node in nodes:
        directory = three.directory / node["node"]
        config = tomllib.loads((directory / "roleserve.toml").read_text())
        assert config["plugins"]["controlplane"]["lease_ttl"] == 3  # the fixture's, kept
        assert config["plugins"]["hostsfile"]["path"] == str(directory / "hosts")
        assert node["hosts_file"] == str(directory / "hosts")
        assert f"its hosts file is {directory / 'hosts'}" in three.made
    for node in nodes:
        wait_for_hosts(Path(node["hosts_file"]), node_addresses(nodes))


def test_a_stopped_cluster_comes_back_with_the_same_command(three: Three) -> None:
    down = cluster("down", "--dir", str(three.directory))
    assert down.returncode == 0, down.stderr
    assert all(node["pid"] is None for node in status(three.directory))
    again = cluster(*three.up)
    assert again.returncode == 0, again.stdout + again.stderr
    lines = again.stdout.splitlines()
    started = [i for i, line in enumerate(lines) if line.endswith("(it rejoins)")]
    [leader] = [
        i for i, line in enumerate(lines) if line.endswith("waiting for the cluster's leader")
    ]
    assert len(started) == 3, again.stdout
    assert max(started) < leader, again.stdout  # every node before asking for the leader
    assert "registering" not in again.stdout
    assert "bootstrapping" not in again.stdout
    assert "the cluster is up: 3 nodes\n" in again.stdout
    assert_up_with_roles(status(three.directory))


def test_up_starts_only_the_nodes_that_are_not_running(three: Three) -> None:
    """Without --nodes, too: the cluster's size is what its directory holds."""
    third = LocalCluster.existing(three.directory).nodes[2]
    anyio.run(third.stop)
    before = status(three.directory)
    assert before[2]["pid"] is None
    again = cluster("up", "--detach", "--dir", str(three.directory))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "starting node 3 at" in again.stdout
    assert "starting node 1" not in again.stdout
    assert "starting node 2" not in again.stdout
    assert "the cluster is up: 3 nodes\n" in again.stdout
    after = status(three.directory)
    assert [node["pid"] for node in after[:2]] == [node["pid"] for node in before[:2]]
    assert_up_with_roles(after)
    table = [line for line in again.stdout.splitlines() if line.startswith("n")]
    assert [line.split()[0] for line in table] == ["n1", "n2", "n3"]


def cluster_networks(directory: Path) -> tuple[IPNetwork, list[IPNetwork]]:
    """The cluster network ``up`` recorded for the cluster in ``directory``, and the prefix
    the leader gave each of its nodes that has one."""
    network = ipaddress.ip_network((directory / "cluster-network").read_text().strip())
    prefixes = [
        ipaddress.ip_network(node["cluster"]["cluster_prefix"])
        for node in status(directory)
        if node["cluster"] and node["cluster"]["cluster_prefix"]
    ]
    return network, prefixes


def test_a_second_cluster_beside_the_first_has_a_network_of_its_own(
    three: Three, first_address: ipaddress.IPv4Address, tmp_path: Path, node_config: str
) -> None:
    """Issue 38: every local cluster bootstrapped with 10.192.0.0/11, so two of them on one
    machine gave their node 1s the same prefix, and its pods' 10.192.0.128/25 was on both
    clusters' bridges. A second cluster now gets a network no other local cluster has; one
    asked for that overlaps another's is refused in one line, before anything starts."""
    second = configured(tmp_path / "second", node_config)
    up = cluster("up", "--nodes", "1", "--detach", "--dir", str(second),
                 "--first-address", str(first_address))  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        first_network, first_prefixes = cluster_networks(three.directory)
        second_network, second_prefixes = cluster_networks(second)
        assert f"cluster network {second_network}, no other local cluster's" in up.stdout
        assert not first_network.overlaps(second_network)
        assert len(first_prefixes) >= 3, first_prefixes
        assert len(second_prefixes) == 1, second_prefixes
        assert all(p.subnet_of(first_network) for p in first_prefixes)  # type: ignore[arg-type]
        assert all(p.subnet_of(second_network) for p in second_prefixes)  # type: ignore[arg-type]
        third = tmp_path / "third"
        refused = cluster("up", "--nodes", "1", "--detach", "--dir", str(third),
                          "--cluster-network", str(first_network),
                          "--first-address", str(first_address + 100))  # fmt: skip
        assert refused.returncode == 1, refused.stdout + refused.stderr
        [line] = refused.stderr.splitlines()
        assert line.startswith(
            f"roleserve cluster: error: --cluster-network {first_network} overlaps "
            f"{first_network}, the network of the local cluster in {three.directory}, which "
            "runs; give "
            "--cluster-network a network no other local cluster has"
        ), line
        assert not (third / "n1").exists()  # nothing started
    finally:
        down = cluster("down", "--dir", str(second))
    assert down.returncode == 0, down.stderr


def test_a_restarted_node_that_exits_fails_up_with_its_own_error_first(three: Three) -> None:
    """Node 3 killed and its roleserve.toml given a typo: the node ``up`` starts exits at
    once, while the curator still says HEALTHY by the old process's heartbeats. ``up``
    waits for the new process's own report, so it fails, with the node's line first."""
    n3 = three.directory / "n3"
    config = n3 / "roleserve.toml"
    saved = config.read_text()
    kill_group(status(three.directory)[2]["pid"])
    config.write_text(saved.replace("lease_ttl", "lease_tt"))
    try:
        failed = cluster("up", "--detach", "--dir", str(three.directory))
    finally:
        config.write_text(saved)
        again = cluster("up", "--detach", "--dir", str(three.directory))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "the cluster is up" not in failed.stdout, failed.stdout
    assert failed.stderr.startswith(
        f"roleserve cluster: error: node 3 exited (exit status 2): {config}: "
        "[plugins.controlplane] has no setting 'lease_tt' (did you mean 'lease_ttl'?)"
    ), failed.stderr
    assert failed.stderr.endswith(f" (its log: {n3 / 'node.log'})\n"), failed.stderr
    assert failed.stderr.count("\n") == 1, failed.stderr
    assert again.returncode == 0, again.stdout + again.stderr
    assert_up_with_roles(status(three.directory))


def test_a_node_that_exits_in_the_foreground_shows_this_starts_cause_first(
    three: Three,
) -> None:
    """Node 3 stopped cleanly and its roleserve.toml made garbage, its log holding an error
    of an earlier attempt: a foreground ``up`` fails with this start's line, not the old one."""
    n3 = three.directory / "n3"
    config = n3 / "roleserve.toml"
    saved = config.read_text()
    anyio.run(LocalCluster.existing(three.directory).nodes[2].stop)
    with (n3 / "node.log").open("a") as log:
        log.write("roleserve node: error: an error of an earlier attempt\n")
    config.write_text("garbage [[[\n")
    try:
        failed = cluster("up", "--dir", str(three.directory))
    finally:
        config.write_text(saved)
        again = cluster("up", "--detach", "--dir", str(three.directory))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert failed.stderr == (
        f"roleserve cluster: error: node 3 exited (exit status 2): {config} is not valid "
        "TOML: Expected '=' after a key in a key/value pair (at line 1, column 9) (its log: "
        f"{n3 / 'node.log'})\n"
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert_up_with_roles(status(three.directory))


def kill_group(pid: int) -> None:
    """SIGKILL the node ``pid`` leads and everything it started (etcd), as a crash would;
    wait until the whole group is gone."""
    os.killpg(pid, signal.SIGKILL)

    async def gone() -> bool:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        return False

    anyio.run(lambda: poll_until(f"process group {pid} gone", gone, timeout=30))


def test_ctl_takes_the_tables_names_with_the_clusters_directory(three: Three) -> None:
    """The names the status table shows work in ctl, given the cluster's directory."""
    nodes = status(three.directory)
    # An approved node: nothing changes.
    approved = run_ctl(three.directory, "approve", "n2", timeout=TIMEOUT)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == f"approved {nodes[1]['cluster']['id']}\n"
    tree = run_ctl(three.directory, "tree", "n3", timeout=TIMEOUT)
    assert tree.returncode == 0, tree.stderr


NO_QUORUM_NOTE = "waiting: no quorum (1 of 3 members answer)"
"""The survivor's curator runnable's note once it waits for its member without a quorum
(it may follow for a few seconds first, until its lease grant times out)."""


def wait_for(what: str, look: Callable[[], T], predicate: Callable[[T], bool]) -> T:
    """``poll_until`` for a look that runs a command."""

    async def looking() -> T:
        return look()

    return anyio.run(lambda: poll_until(what, looking, predicate, timeout=60))


def assert_no_quorum_said(owner: Path, survivor: dict[str, Any], lost: list[Any]) -> None:
    """ctl says at once that there is no quorum, who answers and who does not; the
    survivor's log and its curator's note in ``ctl tree`` say so too."""
    wait_for(
        "ctl says no quorum",
        lambda: run_ctl(owner, "nodes", timeout=TIMEOUT).stderr,
        lambda e: "no quorum" in e,
    )
    start = time.monotonic()
    answer = run_ctl(owner, "nodes", timeout=TIMEOUT)
    took = time.monotonic() - start
    assert answer.returncode == 1
    assert took < 5, (took, answer.stderr)
    assert "no quorum: 1 of 3 consensus members answer" in answer.stderr, answer.stderr
    assert f"({survivor['cluster']['id']})" in answer.stderr, answer.stderr
    for node in lost:
        assert f"{node['cluster']['id']} {node['address']}" in answer.stderr, answer.stderr
    assert f"cluster up --dir {owner.parent}" in answer.stderr, answer.stderr
    log = owner.parent / survivor["node"] / "node.log"
    wait_for("the survivor logs no quorum", log.read_text, lambda text: NO_QUORUM_NOTE in text)

    def curator_line() -> str:
        tree = run_ctl(
            owner, "tree", survivor["cluster"]["id"], "root.role.controlplane", timeout=TIMEOUT
        )
        assert "reaching the members that answer" in tree.stderr, tree.stderr
        return "".join(line for line in tree.stdout.splitlines() if " curator " in line)

    wait_for("ctl tree shows the curator's note", curator_line, lambda seen: NO_QUORUM_NOTE in seen)


def test_two_lost_members_are_named_by_ctl_and_brought_back_by_up(three: Three) -> None:
    """Two of three consensus members SIGKILLed: ctl says at once that there is no quorum,
    naming who answers and who does not; ``up`` starts both before it waits for a leader,
    and the survivor keeps running throughout, with the cluster's data."""
    before = status(three.directory)
    for node in before[:2]:
        kill_group(node["pid"])
    survivor = before[2]
    try:
        assert_no_quorum_said(three.directory / "owner", survivor, before[:2])
    finally:  # whatever failed, the next tests get their cluster back
        again = cluster("up", "--detach", "--dir", str(three.directory))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "starting node 1 at" in again.stdout
    assert "starting node 2 at" in again.stdout
    assert f"node 3 at {survivor['address']} runs (pid {survivor['pid']})" in again.stdout
    after = status(three.directory)
    assert after[2]["pid"] == survivor["pid"]
    assert [node["cluster"]["id"] for node in after] == [n["cluster"]["id"] for n in before]
    assert_up_with_roles(after)


def test_ctrl_c_stops_only_the_nodes_up_started(three: Three) -> None:
    """One node down; a foreground ``up`` starts it, and Ctrl-C stops that one only: the
    others ran before, keep their processes, and the output says so."""
    before = status(three.directory)
    kill_group(before[0]["pid"])
    argv = [*COMMAND, "up", "--dir", str(three.directory)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        for line in process.stdout:  # no terminal: the table is printed once, when up
            if line.startswith("n1 ") and " UP " in line:
                break
        else:
            pytest.fail(f"cluster up ended ({process.wait()}): {process.stderr.read()}")
        process.send_signal(signal.SIGINT)
        rest, errors = process.communicate(timeout=TIMEOUT)
        stopped = status(three.directory)
    finally:
        if process.poll() is None:
            process.kill()
        again = cluster("up", "--detach", "--dir", str(three.directory))
    assert process.returncode == 0, errors
    assert "node 2, node 3 ran before this `cluster up` and keep running" in rest, rest
    assert rest.splitlines()[-1].endswith("the nodes this run started stopped"), rest
    assert stopped[0]["pid"] is None
    assert [node["pid"] for node in stopped[1:]] == [node["pid"] for node in before[1:]]
    assert again.returncode == 0, again.stdout + again.stderr
    assert_up_with_roles(status(three.directory))


def test_nodes_fewer_than_the_directory_holds_is_refused(three: Three) -> None:
    before = status(three.directory)
    refused = cluster("up", "--nodes", "2", "--detach", "--dir", str(three.directory))
    assert refused.returncode == 1
    assert refused.stderr == (
        f"roleserve cluster: error: the cluster in {three.directory} has 3 nodes, and "
        "`cluster up` does not shrink it: run it without --nodes (or with --nodes 3 or "
        "more); a node leaves through `ctl decommission`\n"
    )
    assert [node["pid"] for node in status(three.directory)] == [node["pid"] for node in before]


def test_more_nodes_than_the_directory_holds_grow_the_cluster(three: Three) -> None:
    before = status(three.directory)
    grown = cluster("up", "--nodes", "4", "--detach", "--dir", str(three.directory))
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert "the cluster has 3 nodes; --nodes 4 adds node 4 as a new node" in grown.stdout
    assert "registering node 4 at" in grown.stdout
    assert "the cluster is up: 4 nodes\n" in grown.stdout
    after = status(three.directory)
    assert [node["pid"] for node in after[:3]] == [node["pid"] for node in before]
    assert_up_with_roles(after)  # node 4: kubernetes_worker only


def test_a_decommissioned_node_is_refused_stops_and_leaves_the_hosts_files(
    three: Three,
) -> None:
    """Node 4 (``kubernetes_worker`` only, so no role to take away first) is decommissioned:
    a Watch open with its certificate ends, the leader refuses its certificate on Watch,
    UpdateNodeStatus and Heartbeat, the node stops (exit 1, with the reason in its log),
    started again it exits 1 at once with the reason, and the other nodes' hosts files drop
    its line."""
    nodes = status(three.directory)
    assert len(nodes) == 4
    for node in nodes:
        wait_for_hosts(Path(node["hosts_file"]), node_addresses(nodes))
    fourth = nodes[3]["cluster"]["id"]
    n4 = three.directory / "n4"
    credentials = NodeCredentials.load(NodeDataDirectory(n4).credentials)
    refusal = f"node {fourth} is decommissioned: "

    ended, refused = anyio.run(_decommission_while_watching, three.directory, credentials)
    assert ended.startswith(f"PERMISSION_DENIED: {refusal}"), ended
    assert sorted(refused) == ["Heartbeat", "UpdateNodeStatus", "Watch"]
    for said in refused.values():
        assert said.startswith(f"PERMISSION_DENIED: {refusal}"), refused

    anyio.run(
        lambda: poll_until(
            "node 4 stops", _pid_of(three.directory, 3), lambda pid: pid is None, timeout=TIMEOUT
        )
    )
    assert f"roleserve node: error: {refusal}" in (n4 / "node.log").read_text()

    restarted = subprocess.run(
        [*NODE_RUN, "--data-dir", str(n4), "--address", nodes[3]["address"]],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert restarted.returncode == 1, restarted.stderr
    assert restarted.stderr.splitlines()[-1].startswith(f"roleserve node: error: {refusal}")

    remaining = node_addresses(nodes[:3])
    for node in nodes[:3]:
        wait_for_hosts(Path(node["hosts_file"]), remaining)


NODE_RUN = [sys.executable, "-m", "roleserve_core", "node", "run"]
EVERY_NODE = curator_pb2.WatchRequest(nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster())


def _pid_of(directory: Path, index: int) -> Callable[[], Awaitable[int | None]]:
    """Node ``index``'s (0-based) PID as ``cluster status`` shows it, for ``poll_until``."""

    async def look() -> int | None:
        pid: int | None = status(directory)[index]["pid"]
        return pid

    return look


async def _decommission_while_watching(
    directory: Path, credentials: NodeCredentials
) -> tuple[str, dict[str, str]]:
    """Decommission the node of ``credentials`` (by ``ctl``) while a Watch of every node is
    open with them; how that Watch ended, then how each call with them is answered."""
    access = ClusterAccess.load(directory / "owner")
    leader = await find_leader(access.endpoints, access.credentials)
    async with secure_channel(leader.endpoint, credentials, node_id=leader.node_id) as channel:
        curator = curator_pb2_grpc.CuratorStub(channel)
        watch = curator.Watch(EVERY_NODE)
        with anyio.fail_after(TIMEOUT):
            await watch.read()  # the snapshot: the watch is open
            gone = await anyio.run_process(
                [
                    *CTL,
                    "--credentials",
                    str(directory / "owner"),
                    "decommission",
                    credentials.node_id,
                    "--yes",
                ],
                check=False,
            )
            assert gone.returncode == 0, gone.stderr
            assert f"decommissioned {credentials.node_id}" in gone.stdout.decode()
        with anyio.fail_after(STREAM_END_TIMEOUT):  # the decommission ends the watch
            ended = await _outcome(_to_the_end(watch))
        request = curator_pb2.UpdateNodeStatusRequest(
            node_id=credentials.node_id, status=common_pb2.NodeStatus(external_address="127.0.0.1")
        )
        beats = iter([curator_pb2.HeartbeatRequest()])
        calls = {
            "Watch": _outcome(curator.Watch(EVERY_NODE).read()),
            "UpdateNodeStatus": _outcome(curator.UpdateNodeStatus(request, timeout=TIMEOUT)),
            "Heartbeat": _outcome(curator.Heartbeat(beats).read()),
        }
        return ended, {method: await call for method, call in calls.items()}


CTL = [sys.executable, "-m", "roleserve_core", "ctl"]
STREAM_END_TIMEOUT = 30.0
"""Seconds for a decommission to end its node's open streams (moments: the leader's node
cache follows etcd)."""


async def _to_the_end(watch: Any) -> None:
    while True:
        await watch.read()


async def _outcome(call: Awaitable[object]) -> str:
    """``CODE: details`` of the call's failure; ``answered`` if it succeeded."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    return "answered"
