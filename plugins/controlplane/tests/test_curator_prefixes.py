"""Node prefixes of the cluster network: the arithmetic, the allocation in etcd (unique
even between two leaders racing), approval, decommission, and a new leader's catch-up."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import AsyncIterator

import anyio
import grpc
import pytest

from roleserve_controlplane.consensus import Election, EtcdClient
from roleserve_controlplane.curator import (
    BootstrapMaterial,
    ClusterNetwork,
    ClusterState,
    PrefixesExhaustedError,
    write_bootstrap,
)
from roleserve_controlplane.curator.curator import allocate_missing_prefixes
from roleserve_controlplane.curator.prefixes import PREFIXES_PREFIX, prefix_key
from roleserve_controlplane.curator.state import LEADER_PREFIX, node_key
from roleserve_controlplane.proto import state_pb2
from roleserve_controlplane.testing import CuratorCluster
from roleserve_controlplane.testing.curator_api import Applicant, CuratorApi, refused
from roleserve_core import ConfigError, common_pb2, curator_pb2
from roleserve_core.identity import generate_key

NEW = common_pb2.NODE_STATE_NEW
STANDBY = common_pb2.NODE_STATE_STANDBY
UP = common_pb2.NODE_STATE_UP
DECOMMISSIONED = common_pb2.NODE_STATE_DECOMMISSIONED
DEFAULT = ClusterNetwork.parse()
ADDRESS = ipaddress.IPv4Address("192.0.2.1")


# -- the arithmetic ------------------------------------------------------------------


def test_the_default_network_holds_8192_prefixes_of_24() -> None:
    assert (str(DEFAULT.network), DEFAULT.prefix_length, DEFAULT.size) == (
        "10.192.0.0/11",
        24,
        8192,
    )
    assert str(DEFAULT.prefix(0)) == "10.192.0.0/24"
    assert str(DEFAULT.prefix(1)) == "10.192.1.0/24"
    assert str(DEFAULT.prefix(8191)) == "10.223.255.0/24"
    assert DEFAULT.index("10.223.255.0/24") == 8191
    for outside in ["10.224.0.0/24", "10.192.0.0/25", "10.192.0.1/24", "fd00::/64", "x"]:
        assert DEFAULT.index(outside) is None
    with pytest.raises(IndexError):
        DEFAULT.prefix(8192)


def test_ipv6_networks_work_alike() -> None:
    network = ClusterNetwork.parse("fd00:10::/48", 64)
    assert network.size == 65536
    assert str(network.prefix(65535)) == "fd00:10:0:ffff::/64"
    assert network.index("fd00:10:0:ffff::/64") == 65535


def test_the_lowest_free_prefix_is_given_and_exhaustion_gives_the_numbers() -> None:
    small = ClusterNetwork.parse("10.0.0.0/30", 31)
    assert str(small.first_free([])) == "10.0.0.0/31"
    assert str(small.first_free(["10.0.0.0/31", "10.9.0.0/31"])) == "10.0.0.2/31"
    assert str(small.first_free(["10.0.0.2/31"])) == "10.0.0.0/31"  # a freed one, again
    with pytest.raises(PrefixesExhaustedError, match=r"all 2 /31 prefixes of .* 10.0.0.0/30"):
        small.first_free(["10.0.0.0/31", "10.0.0.2/31"])


def test_an_empty_configuration_means_the_default() -> None:
    assert ClusterNetwork.of(state_pb2.ClusterConfiguration()) == DEFAULT
    configuration = state_pb2.ClusterConfiguration()
    ClusterNetwork.parse("172.16.0.0/12", 20).configure(configuration)
    assert ClusterNetwork.of(configuration) == ClusterNetwork.parse("172.16.0.0/12", 20)


@pytest.mark.parametrize(
    ("network", "length", "message"),
    [
        ("10.0.0.0/16", 16, "node prefix length /16 must be longer than the cluster network's /16"),
        ("10.0.0.0/16", 8, "must be longer"),
        ("fd00::/48", 129, "at most /128"),
        ("100.64.0.0/10", 24, "100.64.0.0/10 is not a private network"),
        ("fe80::/64", 96, "not a private network"),
        ("10.0.0.0/33", 34, "is not a network in CIDR form"),
    ],
)
def test_a_bad_network_is_refused_in_one_line(network: str, length: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused_:
        ClusterNetwork.parse(network, length)
    assert "\n" not in str(refused_.value)


# -- in etcd: the bootstrap, and allocations of leaders ---------------------------------


@pytest.mark.anyio
async def test_the_bootstrap_keeps_the_network_and_gives_the_first_node_its_first_prefix(
    etcd_client: EtcdClient,
) -> None:
    material = BootstrapMaterial.create(generate_key(), ADDRESS)
    network = ClusterNetwork.parse("fd00:10::/48", 64)
    assert await write_bootstrap(etcd_client, material, ADDRESS, network=network)
    state = ClusterState(etcd_client)
    assert ClusterNetwork.of(await state.configuration()) == network
    nodes, _ = await state.nodes()
    assert nodes[0].cluster_prefix == "fd00:10::/64"
    assert await state.allocated_prefixes() == {"fd00:10::/64": nodes[0].id}


@contextlib.asynccontextmanager
async def _leader(client: EtcdClient, name: str) -> AsyncIterator[ClusterState]:
    election = Election(client, f"{LEADER_PREFIX}{name}/", ttl=60)  # no renewal in a test
    async with election.campaign(name.encode()) as leadership:
        yield ClusterState(client, leadership)


@pytest.fixture
async def two_leaders(etcd_client: EtcdClient) -> AsyncIterator[tuple[ClusterState, ClusterState]]:
    """Two curators that both believe they lead (each won its own election): the worst a
    leader change could look like, a deposed leader still writing next to the new one."""
    async with _leader(etcd_client, "a") as first, _leader(etcd_client, "b") as second:
        yield first, second


def _record(node: str, state: common_pb2.NodeState.ValueType = NEW) -> state_pb2.NodeRecord:
    return state_pb2.NodeRecord(id=node, state=state)


async def _stored(state: ClusterState, node: str) -> state_pb2.NodeRecord:
    stored = await state.node(node)
    assert stored is not None
    return stored.record


def _approve(record: state_pb2.NodeRecord) -> None:
    if record.state == NEW:
        record.state = STANDBY


def _decommission(record: state_pb2.NodeRecord) -> None:
    record.state = DECOMMISSIONED
    record.cluster_prefix = ""


async def _approving(state: ClusterState, node: str) -> None:
    await state.update_node(node, _approve, allocate=DEFAULT)


@pytest.mark.anyio
async def test_fifty_approvals_by_two_racing_leaders_give_fifty_different_prefixes(
    two_leaders: tuple[ClusterState, ClusterState],
) -> None:
    first, second = two_leaders
    nodes = [f"node-{i:02}" for i in range(50)]
    for node in nodes:
        assert await first.create_node(_record(node))
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            for i, node in enumerate(nodes):
                leader = first if i % 2 else second
                tasks.start_soon(_approving, leader, node)
    records = {node: await _stored(first, node) for node in nodes}
    prefixes = {record.cluster_prefix for record in records.values()}
    assert len(prefixes) == 50
    assert prefixes == {str(DEFAULT.prefix(i)) for i in range(50)}  # the lowest ones, no gap
    assert all(record.state == STANDBY for record in records.values())
    allocated = await first.allocated_prefixes()
    assert allocated == {record.cluster_prefix: node for node, record in records.items()}


@pytest.mark.anyio
async def test_a_prefix_is_freed_at_decommission_and_only_then_given_again(
    two_leaders: tuple[ClusterState, ClusterState],
) -> None:
    state, _ = two_leaders
    for node in ("node-a", "node-b", "node-c"):
        await state.create_node(_record(node))
    a = await state.update_node("node-a", _approve, allocate=DEFAULT)
    b = await state.update_node("node-b", _approve, allocate=DEFAULT)
    assert (a.cluster_prefix, b.cluster_prefix) == ("10.192.0.0/24", "10.192.1.0/24")
    # Approving again, or any later update, keeps the prefix.
    assert (await state.update_node("node-a", _approve, allocate=DEFAULT)) == a
    gone = await state.update_node("node-a", _decommission)
    assert gone.cluster_prefix == ""
    assert await state.client.get(prefix_key("10.192.0.0/24")) is None
    c = await state.update_node("node-c", _approve, allocate=DEFAULT)
    assert c.cluster_prefix == "10.192.0.0/24"  # freed, so given again
    assert await state.allocated_prefixes() == {
        "10.192.0.0/24": "node-c",
        "10.192.1.0/24": "node-b",
    }


@pytest.mark.anyio
async def test_a_full_network_refuses_the_approval_and_writes_nothing(
    two_leaders: tuple[ClusterState, ClusterState],
) -> None:
    state, _ = two_leaders
    tiny = ClusterNetwork.parse("10.0.0.0/24", 25)
    for node in ("node-a", "node-b", "node-c"):
        await state.create_node(_record(node))
        if node != "node-c":
            await state.update_node(node, _approve, allocate=tiny)
    before = await state.node("node-c")
    with pytest.raises(PrefixesExhaustedError, match="all 2 /25 prefixes"):
        await state.update_node("node-c", _approve, allocate=tiny)
    assert await state.node("node-c") == before


@pytest.mark.anyio
async def test_a_new_leader_gives_approved_nodes_without_a_prefix_one(
    two_leaders: tuple[ClusterState, ClusterState],
) -> None:
    state, _ = two_leaders
    # Records as a cluster made before prefixes has them: approved, without a prefix.
    await state.create_node(_record("node-up", UP))
    await state.create_node(_record("node-standby", STANDBY))
    await state.create_node(_record("node-new", NEW))
    await state.create_node(_record("node-gone", DECOMMISSIONED))
    await state.create_node(_record("node-held", NEW))
    held = (await state.update_node("node-held", _approve, allocate=DEFAULT)).cluster_prefix
    assert await allocate_missing_prefixes(state, DEFAULT) == 2
    allocated = await state.allocated_prefixes()
    assert sorted(allocated.values()) == ["node-held", "node-standby", "node-up"]
    assert allocated[held] == "node-held"  # kept
    for node in ("node-new", "node-gone"):
        assert (await _stored(state, node)).cluster_prefix == ""
    # A restart (another term) finds nothing to do and changes nothing.
    before, _ = await state.client.get_prefix("/")
    assert await allocate_missing_prefixes(state, DEFAULT) == 0
    assert (await state.client.get_prefix("/"))[0] == before
    assert len((await state.client.get_prefix(PREFIXES_PREFIX))[0]) == 3


# -- through the Management service ----------------------------------------------------


@pytest.fixture
def api(curators) -> CuratorApi:
    return CuratorApi(curators)


@pytest.mark.anyio
async def test_approval_gives_a_prefix_shown_to_the_node_and_the_operator(
    api: CuratorApi, curators
) -> None:
    first = curators.nodes[0]
    applicants = [Applicant() for _ in range(2)]
    ids = [await api.register(applicant) for applicant in applicants]
    assert (await api.nodes())[ids[0]].cluster_prefix == ""  # not before approval
    for node in ids:
        await api.approve(node)
    nodes = await api.nodes()
    prefixes = [nodes[node].cluster_prefix for node in (first.node_id, *ids)]
    assert prefixes == ["10.192.0.0/24", "10.192.1.0/24", "10.192.2.0/24"]
    # The node reads its own from its record, through Watch.
    watched = await api.settled(lambda seen: seen[ids[1]].cluster_prefix)
    assert watched[ids[1]].cluster_prefix == "10.192.2.0/24"

    await api.decommission(ids[0])
    assert (await api.nodes())[ids[0]].cluster_prefix == ""
    later = await api.register(Applicant())
    await api.approve(later)
    assert (await api.nodes())[later].cluster_prefix == "10.192.1.0/24"


@pytest.mark.anyio
async def test_concurrent_approvals_through_the_api_give_different_prefixes(
    api: CuratorApi, curators
) -> None:
    ids = [await api.register(Applicant()) for _ in range(20)]
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            for node in ids:
                tasks.start_soon(api.approve, node)
    nodes = await api.nodes()
    prefixes = {nodes[node].cluster_prefix for node in ids}
    assert len(prefixes) == 20
    assert all(DEFAULT.index(prefix) is not None for prefix in prefixes)


@pytest.mark.anyio
async def test_announcements_inside_the_allocated_prefix_are_accepted_others_refused(
    api: CuratorApi, curators
) -> None:
    node = await curators.enrol(1)
    nodes = await api.nodes()
    own = nodes[node.node_id].cluster_prefix
    other = nodes[curators.nodes[0].node_id].cluster_prefix
    assert own == "10.192.1.0/24"
    key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="

    async def announce(*prefixes: str) -> None:
        clusternet = common_pb2.NodeClusterNetworking(wireguard_pubkey=key, prefixes=prefixes)
        async with api.curator(node.credentials) as curator:
            await curator.UpdateNodeClusterNetworking(
                curator_pb2.UpdateNodeClusterNetworkingRequest(clusternet=clusternet)
            )

    await announce(f"{node.address}/32", own, "10.192.1.128/25", "10.200.0.0/16")
    with refused(grpc.StatusCode.INVALID_ARGUMENT, f"overlaps {other}, the prefix of node"):
        await announce(own, "10.192.0.0/23")


@pytest.mark.anyio
async def test_prefixes_survive_a_restart_and_a_new_leader_gives_missing_ones(
    api: CuratorApi, curators: CuratorCluster
) -> None:
    first = curators.nodes[0]
    second = await curators.enrol(1)
    before = {node: shown.cluster_prefix for node, shown in (await api.nodes()).items()}
    assert sorted(before.values()) == ["10.192.0.0/24", "10.192.1.0/24"]

    await curators.restart_curator(first)
    await curators.leader()
    assert {node: shown.cluster_prefix for node, shown in (await api.nodes()).items()} == before

    # Make the second node what a cluster from before prefixes holds: approved, no prefix.
    assert first.member is not None
    async with first.member.client() as client:
        stored = await client.get(node_key(second.node_id))
        assert stored is not None
        record = state_pb2.NodeRecord.FromString(stored.value)
        record.ClearField("cluster_prefix")
        await client.put(node_key(second.node_id), record.SerializeToString())
        await client.delete(prefix_key(before[second.node_id]))
    await curators.restart_curator(first)
    await curators.leader()
    after = await api.settled(lambda nodes: nodes[second.node_id].cluster_prefix)
    assert after[second.node_id].cluster_prefix == "10.192.1.0/24"  # the lowest free one
    assert after[first.node_id].cluster_prefix == before[first.node_id]
