"""``cluster_nodes``: the fold, the follower helper, and the core worker ``nodewatch``.

The worker runs in a node runtime against fake curators of the test kit (real gRPC servers
on loopback, counting their open Watch streams), with a test plugin whose workers read the
value. Nothing waits on a sleep.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from roleserve_core import NodeContext, RunContext, Worker, custom_role, hookimpl
from roleserve_core.clusternodes import (
    ClusterNodes,
    NodeChanges,
    NodeWatchFold,
    node_address,
    node_changes,
)
from roleserve_core.event import ValueWatch
from roleserve_core.proto import common_pb2, curator_pb2
from roleserve_core.roles import NodeRoles
from roleserve_core.runtime import CORE_READER
from roleserve_core.supervisor import State
from roleserve_core.testing import (
    FakeCluster,
    FakeCurator,
    NodeHarness,
    node_record,
    start_plugin_node,
    wait_for_value,
)
from roleserve_core.values import CLUSTER_NODES, CURATOR_CONNECTION
from roleserve_core.workers.nodewatch import IDLE_NOTE

pytestmark = pytest.mark.anyio

NODEWATCH = "root.role.nodewatch"
LAST = curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED


def event(
    *nodes: curator_pb2.Node, gone: tuple[str, ...] = (), last: bool = False
) -> curator_pb2.WatchEvent:
    built = curator_pb2.WatchEvent(nodes=nodes, progress=LAST if last else 0)  # type: ignore[arg-type]
    for node_id in gone:
        built.node_tombstones.add(node_id=node_id)
    return built


# -- the fold and the follower helper, as plain functions --------------------------------


def test_fold_publishes_nothing_until_the_whole_backlog_is_read() -> None:
    fold = NodeWatchFold()
    assert fold.apply(event(node_record("a"))) is False  # a backlog in two events: not whole yet
    assert fold.apply(event(node_record("b"), last=True)) is True
    assert fold.view() == ClusterNodes(
        {"a": node_record("a"), "b": node_record("b")}, backlogged=True
    )


def test_fold_follows_changes_and_tombstones_after_the_backlog() -> None:
    fold = NodeWatchFold()
    fold.apply(event(node_record("a"), node_record("b"), last=True))
    assert fold.apply(event(node_record("a", "10.0.0.1"))) is True
    assert fold.apply(event(gone=("b",))) is True
    assert fold.apply(event()) is False  # an event that changes nothing publishes nothing
    assert dict(fold.view()) == {"a": node_record("a", "10.0.0.1")}


def test_fold_of_an_empty_cluster_is_a_whole_empty_view() -> None:
    fold = NodeWatchFold()
    assert fold.apply(event(last=True)) is True
    assert fold.view() == ClusterNodes({}, backlogged=True)


def test_cluster_nodes_is_an_immutable_mapping() -> None:
    source = {"a": node_record("a")}
    view = ClusterNodes(source, backlogged=True)
    source["b"] = node_record("b")  # the view copied the map
    assert list(view) == ["a"]
    with pytest.raises(TypeError):
        view["b"] = node_record("b")  # type: ignore[index]
    assert view.stale() == ClusterNodes({"a": node_record("a")}, backlogged=False)
    assert "1 nodes: a" in repr(view)


def test_changes_names_added_updated_and_removed_nodes() -> None:
    old = {"a": node_record("a"), "b": node_record("b"), "c": node_record("c")}
    new = {"a": node_record("a"), "b": node_record("b", "10.0.0.2"), "d": node_record("d")}
    found = node_changes(old, new)
    assert found == NodeChanges(
        added=(node_record("d"),), updated=(node_record("b", "10.0.0.2"),), removed=("c",)
    )
    assert not node_changes(new, new)


def test_changes_counts_only_included_nodes_and_its_own_equality() -> None:
    def is_up(record: curator_pb2.Node) -> bool:
        return record.state == common_pb2.NODE_STATE_UP

    def same_address(old: curator_pb2.Node, new: curator_pb2.Node) -> bool:
        return old.status.external_address == new.status.external_address

    old = {"a": node_record("a", "10.0.0.1"), "b": node_record("b")}
    new = {
        "a": node_record("a", "10.0.0.1", state=common_pb2.NODE_STATE_DECOMMISSIONED),
        "b": node_record("b", "10.0.0.2"),
    }
    assert node_changes(old, new, include=is_up) == NodeChanges(
        (), (node_record("b", "10.0.0.2"),), ("a",)
    )
    labelled = node_record("b")
    labelled.labels.pairs.add(key="zone", value="x")
    assert not node_changes({"b": node_record("b")}, {"b": labelled}, same=same_address)


@pytest.mark.parametrize(
    ("address", "expected"), [("", None), ("10.0.0.1", "10.0.0.1"), ("fd00::1", "fd00::1")]
)
def test_node_address(address: str, expected: str | None) -> None:
    found = node_address(node_record("a", address))
    assert (str(found) if found is not None else None) == expected


def test_node_address_refuses_one_that_does_not_parse() -> None:
    with pytest.raises(ValueError, match="not-an-ip"):
        node_address(node_record("a", "not-an-ip"))


# -- nodewatch in a node ------------------------------------------------------------------

READER_ROLE = "reader"


class Readers:
    """A test plugin: ``count`` workers that read ``cluster_nodes``, gated on the custom
    role ``reader`` if ``gated``; each is HEALTHY once it saw a whole view."""

    def __init__(self, count: int, *, gated: bool = False) -> None:
        self.count = count
        self.gated = gated

    @hookimpl
    def roleserve_workers(self, node: NodeContext) -> list[Worker]:
        when = custom_role(READER_ROLE) if self.gated else None
        return [
            Worker(f"reader_{index}", self._read(node), when=when, reads=(CLUSTER_NODES,))
            for index in range(self.count)
        ]

    @staticmethod
    def _read(node: NodeContext) -> Callable[[RunContext], Awaitable[None]]:
        async def read(ctx: RunContext) -> None:
            with node.values.watch(CLUSTER_NODES) as views:
                await views.get(filter=lambda view: view.backlogged)
                ctx.signal_healthy()
                async for _view in views:
                    pass

        return read


Start = Callable[..., Awaitable[NodeHarness]]


@pytest.fixture
def cluster(fake_cluster: FakeCluster) -> FakeCluster:
    return fake_cluster


@pytest.fixture
def start(cluster: FakeCluster, node: Start, tmp_path: Path) -> Start:
    """Start a node with the core's nodewatch and ``readers`` (the cluster first: see
    ``fake_cluster``)."""

    async def started(readers: Readers) -> NodeHarness:
        return await start_plugin_node(node, tmp_path, {"readers": readers}, cluster_nodes=True)

    return started


def cluster_nodes(harness: NodeHarness) -> ValueWatch[ClusterNodes]:
    return harness.runtime.registry.read(CLUSTER_NODES, CORE_READER)


async def leading(cluster: FakeCluster, *node_ids: str) -> FakeCurator:
    curator = await cluster.curator()
    curator.lead()
    for node_id in node_ids:
        curator.set_node(node_record(node_id, "10.0.0.1"))
    return curator


def ids(view: ClusterNodes) -> list[str]:
    return sorted(view)


async def test_nodewatch_holds_no_stream_while_nobody_reads(
    cluster: FakeCluster, start: Start
) -> None:
    curator = await leading(cluster, "node-a")
    harness = await start(Readers(0))
    harness.set(CURATOR_CONNECTION, cluster.connect(curator))
    await harness.wait_status(NODEWATCH, lambda status: status.note == IDLE_NOTE)
    assert (curator.requests("Watch"), curator.open_watches.get_nowait()) == ([], 0)
    assert not cluster_nodes(harness).statistics().is_set


async def test_one_watch_stream_however_many_readers(cluster: FakeCluster, start: Start) -> None:
    curator = await leading(cluster, "node-a", "node-b")
    harness = await start(Readers(3))
    harness.set(CURATOR_CONNECTION, cluster.connect(curator))
    for index in range(3):
        await harness.wait_state(f"root.role.reader_{index}", State.HEALTHY)
    assert ids(cluster_nodes(harness).get_nowait()) == ["node-a", "node-b"]
    assert (len(curator.requests("Watch")), curator.open_watches.get_nowait()) == (1, 1)
    assert harness.status(NODEWATCH).state is State.HEALTHY


async def test_the_value_follows_changes_and_removals(cluster: FakeCluster, start: Start) -> None:
    curator = await leading(cluster, "node-a", "node-b")
    harness = await start(Readers(1))
    harness.set(CURATOR_CONNECTION, cluster.connect(curator))
    value = cluster_nodes(harness)
    await wait_for_value(value, lambda view: ids(view) == ["node-a", "node-b"])

    curator.set_node(node_record("node-c", "fd00::3"))
    view = await wait_for_value(value, lambda view: "node-c" in view)
    assert view["node-c"].status.external_address == "fd00::3"
    curator.remove_node("node-a")
    view = await wait_for_value(value, lambda view: "node-a" not in view)
    assert (ids(view), view.backlogged) == (["node-b", "node-c"], True)


async def test_the_stream_closes_when_the_last_reader_stops(
    cluster: FakeCluster, start: Start
) -> None:
    curator = await leading(cluster, "node-a")
    harness = await start(Readers(2, gated=True))
    harness.set(CURATOR_CONNECTION, cluster.connect(curator))
    harness.set_roles(NodeRoles(custom={READER_ROLE: {}}))
    await harness.wait_state("root.role.reader_1", State.HEALTHY)
    assert curator.open_watches.get_nowait() == 1

    harness.set_roles(NodeRoles())
    await wait_for_value(curator.open_watches, lambda count: count == 0)
    await harness.wait_status(NODEWATCH, lambda status: status.note == IDLE_NOTE)
    stale = cluster_nodes(harness).get_nowait()
    assert (ids(stale), stale.backlogged) == (["node-a"], False)

    # A reader again: a fresh stream, and a fresh whole view
    curator.set_node(node_record("node-b", "10.0.0.2"))
    harness.set_roles(NodeRoles(custom={READER_ROLE: {}}))
    view = await wait_for_value(cluster_nodes(harness), lambda view: view.backlogged)
    assert ids(view) == ["node-a", "node-b"]
    assert (len(curator.requests("Watch")), curator.open_watches.get_nowait()) == (2, 1)


async def test_a_leader_change_is_one_consistent_change(
    cluster: FakeCluster, start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old leader's view stays until the new leader's backlog replaces it whole."""
    published: list[ClusterNodes] = []
    view_of = NodeWatchFold.view

    def recorded(fold: NodeWatchFold) -> ClusterNodes:
        published.append(view_of(fold))
        return published[-1]

    monkeypatch.setattr(NodeWatchFold, "view", recorded)
    old = await leading(cluster, "node-a", "node-b", "node-c")
    new = await leading(cluster, "node-a", "node-b", "node-d")
    harness = await start(Readers(1))
    harness.set(CURATOR_CONNECTION, cluster.connect(old))
    value = cluster_nodes(harness)
    await wait_for_value(value, lambda view: "node-c" in view)

    harness.set(CURATOR_CONNECTION, cluster.connect(new))
    await wait_for_value(value, lambda view: "node-d" in view)
    await wait_for_value(old.open_watches, lambda count: count == 0)
    assert [ids(view) for view in published] == [
        ["node-a", "node-b", "node-c"],
        ["node-a", "node-b", "node-d"],
    ]
    assert new.open_watches.get_nowait() == 1
