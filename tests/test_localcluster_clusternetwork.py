"""Each local cluster gets a cluster network of its own on this machine: the choice, the
machine's record of its clusters, the refusals (one line each), and what ``up`` writes into
its nodes' roleserve.toml (no node processes are started here; the machine's record is the
test's own directory)."""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import shutil
import threading
import tomllib
from pathlib import Path

import anyio
import pytest

from roleserve_core.errors import RoleserveError
from roleserve_core.localcluster import LocalCluster, LocalClusterError
from roleserve_core.localcluster.cluster import running
from roleserve_core.localcluster.clusternetwork import (
    CLUSTER_NETWORK_FILE,
    DEFAULT_NETWORK,
    POOL,
    ClusterRecords,
    IPNetwork,
    LocalNetworkError,
    Wanted,
    free_network,
    host_routes,
    network_value,
    saved_network,
    start_for,
)
from roleserve_core.localcluster.layout import MAX_SIZE
from roleserve_core.localcluster.nodeconfig import (
    CLUSTERNET_NETWORK,
    CONTROLPLANE_NETWORK,
    NodeSetting,
)
from roleserve_core.rundir import runtime_key, runtime_root

SERVICE_RANGE = ipaddress.ip_network("10.224.0.0/16")
"""The kubernetes plugin's Service range: virtual addresses, the same in every cluster."""


def net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text)


def slash16s() -> list[IPNetwork]:
    return list(POOL.subnets(new_prefix=16))


def never(directory: Path) -> bool:
    """No other cluster runs."""
    return False


def always(directory: Path) -> bool:
    return True


def no_routes() -> list[IPNetwork]:
    return []


@pytest.fixture
def records(tmp_path: Path) -> ClusterRecords:
    """A machine's record of its own, with no routes on the host."""
    return ClusterRecords(tmp_path / "records", routes=no_routes)


# -- the choice ---------------------------------------------------------------------------


def test_the_pool_is_apart_from_the_default_network_and_the_service_range() -> None:
    """Clusters made before took all of 10.192.0.0/11, and are in no record until their
    next up: a new cluster must never land on their nodes' prefixes."""
    assert not POOL.overlaps(DEFAULT_NETWORK)
    assert not POOL.overlaps(SERVICE_RANGE)
    assert POOL.is_private
    assert len(slash16s()) == 32
    assert MAX_SIZE <= 2 ** (24 - 16)  # a /24 for each node of the largest local cluster


def test_the_first_free_16_from_the_start_is_taken() -> None:
    first, second, third = slash16s()[:3]
    assert free_network([]) == first
    assert free_network([first]) == second
    assert free_network([net("10.128.200.0/24")]) == second  # a part of it is enough
    assert free_network([first, second], start=0) == third
    assert free_network([], start=5) == slash16s()[5]
    last = slash16s()[-1]
    assert free_network([last], start=31) == first  # after the last, the first
    assert free_network([net("10.0.0.0/8")]) is None
    assert free_network(slash16s()) is None
    assert free_network([net("fd00::/8"), net("10.192.0.0/11")]) == first  # not in the way


def test_an_earlier_choice_is_kept_while_it_is_free() -> None:
    chosen = slash16s()[7]
    assert free_network([], preferred=chosen) == chosen
    assert free_network([chosen], preferred=chosen) == slash16s()[0]


def test_each_directory_starts_its_search_at_a_place_of_its_own(tmp_path: Path) -> None:
    starts = {start_for(tmp_path / f"c{index}") for index in range(40)}
    assert len(starts) > 10  # spread, not all at the first
    assert all(0 <= start < 32 for start in starts)
    assert start_for(tmp_path / "c1") == start_for(tmp_path / "c1")


def test_the_hosts_routes_are_read_without_the_default_one(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
        "eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        "cni0\t8000C00A\t00000000\t0001\t0\t0\t0\t80FFFFFF\t0\t0\t0\n"
        "short line\n"
    )
    assert host_routes(table) == [net("192.168.0.0/24"), net("10.192.0.128/25")]
    assert host_routes(tmp_path / "missing") == []
    assert all(route.prefixlen for route in host_routes())  # this machine's, readable


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("10.128.0.0/16", None),
        ("fd12:3456::/48", None),
        ("8.8.0.0/16", "is not a private network"),
        ("10.128.0.1/16", "is not a network in CIDR form"),
        ("10.128.0.0/016", "is not in canonical form (10.128.0.0/16)"),
        ("127.0.0.0/8", "is not a private network"),
    ],
)
def test_a_given_network_must_be_private_and_canonical(text: str, why: str | None) -> None:
    if why is None:
        assert str(network_value(text)) == text
    else:
        with pytest.raises(ValueError, match=re.escape(why)):
            network_value(text)


# -- the machine's record -----------------------------------------------------------------


def test_two_new_clusters_get_networks_apart_each_kept_at_its_next_up(
    tmp_path: Path, records: ClusterRecords
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    first = records.claim(one, Wanted(None), runs=never)
    second = records.claim(two, Wanted(None), runs=never)
    assert not first.overlaps(second)
    assert first.subnet_of(POOL)  # type: ignore[arg-type]
    assert second.subnet_of(POOL)  # type: ignore[arg-type]
    assert (one / CLUSTER_NETWORK_FILE).read_text() == f"{first}\n"
    assert saved_network(two) == second
    assert sorted(records.clusters()) == sorted([(one, first), (two, second)])
    bootstrapped = Wanted(first, bootstrapped=True)
    assert records.claim(one, bootstrapped, runs=always) == first  # itself is no other


def test_a_stopped_cluster_keeps_its_network_and_a_removed_one_gives_it_back(
    tmp_path: Path, records: ClusterRecords
) -> None:
    stopped = tmp_path / "stopped"
    held = records.claim(stopped, Wanted(None), runs=never)
    newcomer = tmp_path / "new"
    taken = records.claim(newcomer, Wanted(None, preferred=held), runs=never)
    assert taken != held  # its network is the stopped one's still
    shutil.rmtree(stopped)
    assert records.clusters(newcomer) == []  # the record of a directory that is gone goes
    assert sorted(path.name for path in records.root.iterdir()) == sorted(
        ["lock", runtime_key(newcomer)]
    )
    later = tmp_path / "later"
    assert records.claim(later, Wanted(None, preferred=held), runs=never) == held


def test_the_hosts_routes_are_no_new_clusters_network(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    own = slash16s()[start_for(directory)]
    routed = ClusterRecords(tmp_path / "records", routes=lambda: [own])
    chosen = routed.claim(directory, Wanted(None), runs=never)
    assert not chosen.overlaps(own)


def test_no_free_network_is_refused_in_one_line_naming_a_cluster_and_the_flag(
    tmp_path: Path,
) -> None:
    full = ClusterRecords(tmp_path / "records", routes=lambda: slash16s()[1:])
    other = tmp_path / "other"
    assert full.claim(other, Wanted(None), runs=never) == slash16s()[0]
    with pytest.raises(LocalNetworkError) as refused:
        full.claim(tmp_path / "new", Wanted(None), runs=never)
    said = str(refused.value)
    assert "\n" not in said
    assert said == (
        f"no /16 of {POOL} is free for a new cluster: the networks of 1 local cluster of "
        f"this machine (one in {other}) and the host's routes take them all; give "
        "--cluster-network a private network no other cluster has, or remove a cluster you "
        "no longer need (`cluster down --dir D`, then its directory D)"
    )
    assert not (tmp_path / "new" / CLUSTER_NETWORK_FILE).exists()


def test_a_given_network_another_cluster_has_is_refused_running_or_not(
    tmp_path: Path, records: ClusterRecords
) -> None:
    other = tmp_path / "other"
    held = records.claim(other, Wanted(None), runs=never)
    inside = net(f"{held.network_address}/24")
    for runs, state in ((always, "runs"), (never, "is stopped, and keeps its network")):
        with pytest.raises(LocalNetworkError) as refused:
            records.claim(tmp_path / "new", Wanted(inside), runs=runs)
        assert str(refused.value) == (
            f"--cluster-network {inside} overlaps {held}, the network of the local cluster "
            f"in {other}, which {state}; give --cluster-network a network no other local "
            "cluster has, or none (up then takes a free one)"
        )
    apart = net("172.20.0.0/16")
    assert records.claim(tmp_path / "new", Wanted(apart), runs=always) == apart


def test_clusters_from_before_on_the_default_network_collide_only_while_both_run(
    tmp_path: Path, records: ClusterRecords
) -> None:
    """Two clusters made before the record both have 10.192.0.0/11: their node 1s hold
    10.192.0.0/24. A new cluster is never in their way."""
    old = tmp_path / "old"
    default = Wanted(DEFAULT_NETWORK, bootstrapped=True)
    assert records.claim(old, default, runs=never) == DEFAULT_NETWORK
    new = records.claim(tmp_path / "new", Wanted(None), runs=always)
    assert new.subnet_of(POOL)  # type: ignore[arg-type]
    older = tmp_path / "older"
    with pytest.raises(LocalNetworkError) as refused:
        records.claim(older, default, runs=lambda directory: directory == old)
    said = str(refused.value)
    assert said == (
        f"the cluster in {older} has the cluster network {DEFAULT_NETWORK}, which overlaps "
        f"{DEFAULT_NETWORK}, the network of the cluster in {old}, which runs: their pods "
        f"would take the same addresses; stop that one first (`cluster down --dir {old}`), "
        "or make this one anew in another --dir (a new cluster gets a network of its own)"
    )
    assert records.claim(older, default, runs=never) == DEFAULT_NETWORK  # the other stopped


def test_ups_at_once_never_take_one_network(tmp_path: Path, records: ClusterRecords) -> None:
    """Each decides holding the machine's lock: without it, two that read the record at
    once took the same first free /16."""
    count = 8
    ready = threading.Barrier(count)
    chosen: dict[int, IPNetwork] = {}
    candidates = (tmp_path / f"c{index}" for index in itertools.count())
    directories = list(itertools.islice((c for c in candidates if start_for(c) == 0), count))

    def claim_own(index: int) -> None:
        ready.wait()
        chosen[index] = records.claim(directories[index], Wanted(None), runs=never)

    threads = [threading.Thread(target=claim_own, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(chosen.values())) == count
    assert {saved_network(directory) for directory in directories} == set(chosen.values())


def test_a_record_that_holds_no_network_is_named(tmp_path: Path, records: ClusterRecords) -> None:
    other = tmp_path / "other"
    records.claim(other, Wanted(None), runs=never)
    (other / CLUSTER_NETWORK_FILE).write_text("nonsense\n")
    with pytest.raises(LocalNetworkError) as refused:
        records.claim(tmp_path / "new", Wanted(None), runs=never)
    assert str(refused.value) == (
        f"{other / CLUSTER_NETWORK_FILE} holds 'nonsense', not a network in CIDR form"
    )
    assert issubclass(LocalNetworkError, RoleserveError)  # cluster up: one line, exit 1


# -- LocalCluster.up: what it asks for, and what it writes --------------------------------


def enrolled(cluster: LocalCluster, index: int = 1) -> None:
    cluster.nodes[index - 1].datadir.credentials.mkdir(parents=True)


def claim(cluster: LocalCluster) -> IPNetwork:
    anyio.run(cluster._claim_network)
    assert cluster.cluster_network is not None
    return cluster.cluster_network


def setting(cluster: LocalCluster, index: int, which: NodeSetting) -> object:
    data = tomllib.loads(cluster.nodes[index - 1].datadir.config.read_text())
    return data.get("plugins", {}).get(which.plugin, {}).get(which.key)


def everything(setting: NodeSetting) -> bool:
    return True


def test_a_new_cluster_bootstraps_with_its_own_network(
    tmp_path: Path, records: ClusterRecords
) -> None:
    said: list[str] = []
    cluster = LocalCluster(
        tmp_path / "c", 2, records=records, accepts=everything, progress=said.append
    )
    network = claim(cluster)
    assert network.subnet_of(POOL)  # type: ignore[arg-type]
    assert said == [
        f"cluster network {network}, no other local cluster's (recorded in "
        f"{cluster.directory / CLUSTER_NETWORK_FILE})"
    ]
    for node in cluster.nodes:
        cluster._write_config(node)
    assert setting(cluster, 1, CONTROLPLANE_NETWORK) == str(network)
    assert setting(cluster, 2, CONTROLPLANE_NETWORK) is None  # read at bootstrap only
    assert setting(cluster, 1, CLUSTERNET_NETWORK) is None  # loopback: no mesh
    again = LocalCluster(tmp_path / "c", 2, records=records)
    enrolled(again)
    assert claim(again) == network


def test_a_netns_clusters_mesh_routes_its_own_network(
    tmp_path: Path, records: ClusterRecords
) -> None:
    cluster = LocalCluster(tmp_path / "c", 2, netns=True, records=records, accepts=everything)
    network = claim(cluster)
    for node in cluster.nodes:
        cluster._write_config(node)
    assert [setting(cluster, index, CLUSTERNET_NETWORK) for index in (1, 2)] == [str(network)] * 2


def test_a_cluster_from_before_keeps_the_network_it_bootstrapped_with(
    tmp_path: Path, records: ClusterRecords
) -> None:
    said: list[str] = []
    old = LocalCluster(tmp_path / "old", 1, records=records, progress=said.append)
    enrolled(old)
    assert claim(old) == DEFAULT_NETWORK
    assert saved_network(old.directory) == DEFAULT_NETWORK  # recorded from now on
    assert said == [f"cluster network {DEFAULT_NETWORK}, as node 1 bootstrapped it"]
    own = LocalCluster(tmp_path / "own", 1, records=records)
    enrolled(own)
    own.nodes[0].datadir.config.write_text(
        '[plugins.controlplane]\ncluster_network = "172.20.0.0/16"\n'
    )
    assert claim(own) == net("172.20.0.0/16")


def test_a_record_removed_by_hand_is_read_back_from_node_1s_setting(
    tmp_path: Path, records: ClusterRecords
) -> None:
    """Node 1 bootstrapped with the line up wrote: that is the cluster's network still."""
    cluster = LocalCluster(tmp_path / "c", 1, records=records, accepts=everything)
    network = claim(cluster)
    cluster._write_config(cluster.nodes[0])
    enrolled(cluster)
    (cluster.directory / CLUSTER_NETWORK_FILE).unlink()
    again = LocalCluster(tmp_path / "c", 1, records=records)
    assert claim(again) == network != DEFAULT_NETWORK
    assert saved_network(cluster.directory) == network


def test_a_second_cluster_from_before_is_refused_while_the_first_runs(
    tmp_path: Path, records: ClusterRecords
) -> None:
    first = LocalCluster(tmp_path / "first", 1, records=records)
    enrolled(first)
    claim(first)
    first.nodes[0].pid_file.write_text(f"{os.getpid()}\n")  # it runs (this process)
    assert running(first.directory)
    second = LocalCluster(tmp_path / "second", 1, records=records)
    enrolled(second)
    with pytest.raises(LocalNetworkError, match=re.escape(f"--dir {first.directory}`")):
        claim(second)
    first.nodes[0].pid_file.unlink()
    assert not running(first.directory)
    assert claim(second) == DEFAULT_NETWORK


def test_the_operators_network_is_the_one_recorded(tmp_path: Path, records: ClusterRecords) -> None:
    asked = net("172.21.0.0/16")
    flagged = LocalCluster(tmp_path / "f", 1, records=records, cluster_network=asked)
    assert claim(flagged) == asked
    config = '[plugins.controlplane]\ncluster_network = "172.22.0.0/16"\n'
    configured = LocalCluster(tmp_path / "c", 1, records=records, config=config)
    assert claim(configured) == net("172.22.0.0/16")  # the cluster's config, for node 1
    node = configured.nodes[0]
    node.directory.mkdir(parents=True)
    node.datadir.config.write_text(config.replace("172.22", "172.23"))
    assert claim(configured) == net("172.23.0.0/16")  # node 1's own file, once it has one
    both = LocalCluster(tmp_path / "c", 1, records=records, cluster_network=asked)
    with pytest.raises(LocalClusterError) as refused:
        claim(both)
    assert str(refused.value) == (
        f'--cluster-network {asked} differs from cluster_network = "172.23.0.0/16" in '
        f"{node.datadir.config}'s [plugins.controlplane], which node 1 bootstraps with; "
        "give the same, or take one of them out"
    )


def test_a_line_up_wrote_is_not_the_operators(tmp_path: Path, records: ClusterRecords) -> None:
    """Node 1 not bootstrapped yet (an up that failed): the line up wrote is its own, and a
    later --cluster-network replaces it."""
    cluster = LocalCluster(tmp_path / "c", 1, records=records, accepts=everything)
    first = claim(cluster)
    cluster._write_config(cluster.nodes[0])
    asked = net("172.24.0.0/16")
    again = LocalCluster(tmp_path / "c", 1, records=records, cluster_network=asked)
    assert claim(again) != first
    again._write_config(again.nodes[0])
    assert setting(again, 1, CONTROLPLANE_NETWORK) == str(asked)


def test_another_network_than_a_bootstrapped_clusters_is_refused(
    tmp_path: Path, records: ClusterRecords
) -> None:
    cluster = LocalCluster(tmp_path / "c", 1, records=records)
    network = claim(cluster)
    enrolled(cluster)
    other = net("172.25.0.0/16")
    refused = LocalCluster(tmp_path / "c", 1, records=records, cluster_network=other)
    with pytest.raises(LocalClusterError) as said:
        claim(refused)
    assert str(said.value) == (
        f"the cluster in {cluster.directory} has the cluster network {network}, set when "
        f"node 1 bootstrapped it; give --cluster-network {network} (or none), or another "
        "--dir for a new cluster"
    )


def test_the_machines_record_is_under_the_runtime_root() -> None:
    """/run/roleserve for root: every root cluster of the machine, whatever its --dir."""
    assert ClusterRecords().root == runtime_root() / "clusters"
