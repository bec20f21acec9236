"""The worker ``metrics_discovery`` in a node: fed by the core's nodewatch from a fake
curator, gated on the node's roles, leaving 503 behind when it stops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from roleserve_core import (
    CURATOR_CONNECTION,
    NODE_ID,
    ConsensusMember,
    KubernetesWorker,
    LogFollower,
    NodeContext,
    NodeRoles,
    Setting,
    State,
    Worker,
    hookimpl,
)
from roleserve_core.testing import (
    DEFAULT_TIMEOUT,
    FakeCluster,
    FakeCurator,
    NodeHarness,
    StartNode,
    node_record,
    start_plugin_node,
)
from roleserve_metrics.discovery import (
    DISCOVERY_SETTING,
    SERVING,
    WAITING_NOTE,
    DiscoveryView,
    discovery_mode,
    discovery_worker,
)

pytestmark = pytest.mark.anyio

DN = "root.role.metrics_discovery"
MEMBER = NodeRoles(consensus_member=ConsensusMember())
WORKER = NodeRoles(kubernetes_worker=KubernetesWorker())
BOTH = NodeRoles(consensus_member=ConsensusMember(), kubernetes_worker=KubernetesWorker())


class DiscoveryPlugin:
    """What the metrics plugin's hooks do with discovery, without its server."""

    def __init__(self) -> None:
        self.view: DiscoveryView | None = None

    @hookimpl
    def roleserve_settings(self) -> list[Setting[Any]]:
        return [DISCOVERY_SETTING]

    @hookimpl
    def roleserve_workers(self, node: NodeContext) -> list[Worker]:
        self.view = DiscoveryView(discovery_mode(node.config))
        return [discovery_worker(node.values, self.view)]


async def start(
    node: StartNode, tmp_path: Path, **settings: Any
) -> tuple[NodeHarness, DiscoveryView]:
    plugin = DiscoveryPlugin()
    harness = await start_plugin_node(
        node,
        tmp_path / "node",
        {"metrics": plugin},
        config={"metrics": settings},
        cluster_nodes=True,
    )
    assert plugin.view is not None
    return harness, plugin.view


async def connect(harness: NodeHarness, cluster: FakeCluster) -> FakeCurator:
    leader = await cluster.curator()
    harness.set(NODE_ID, cluster.credentials.node_id)
    harness.set(CURATOR_CONNECTION, cluster.connect(leader))
    return leader


async def served(log: LogFollower, count: int) -> None:
    """The worker's next log line saying it serves ``count`` nodes."""
    with anyio.fail_after(DEFAULT_TIMEOUT):
        async for entry in log:
            if entry.message.startswith(SERVING):
                assert entry.message == f"{SERVING}: {count} UP node{'s' * (count != 1)}"
                return
    raise AssertionError("the log follower closed")


def labels(view: DiscoveryView) -> dict[str, dict[str, str]]:
    """Node ID → its labels, of what the view serves."""
    assert view.targets is not None
    return {group["labels"]["roleserve_node"]: group["labels"] for group in view.targets}


async def test_runs_on_consensus_members_and_follows_the_cluster(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    harness, view = await start(node, tmp_path)
    leader = await connect(harness, fake_cluster)
    leader.set_node(node_record("node-a", "10.0.0.1", roles=MEMBER))

    harness.set_roles(WORKER)  # discovery = consensus: not on a worker
    gated = await harness.wait_status(DN, lambda s: s.note == "waiting for its roles")
    assert gated.state == State.NEW
    assert view.targets is None

    with harness.runtime.logtree.follow(DN) as log:
        harness.set_roles(MEMBER)
        await served(log, 1)
        status = await harness.wait_state(DN, State.HEALTHY)
        assert status.note == ""
        assert list(labels(view)) == ["node-a"]

        # a worker-role change reaches the targets (Monogon's discovery missed it)
        leader.set_node(node_record("node-a", "10.0.0.1", roles=BOTH))
        await served(log, 1)
        assert labels(view)["node-a"]["roleserve_role_kubernetes_worker"] == "true"

        leader.set_node(node_record("node-b", "10.0.0.2", roles=WORKER))
        await served(log, 2)
        assert list(labels(view)) == ["node-a", "node-b"]

    harness.set_roles(WORKER)  # no longer a member: the worker stops, /discovery says 503
    await harness.wait_state(DN, State.NEW)
    assert view.targets is None
    assert harness.status(DN).failures == 0


async def test_all_serves_on_every_node(
    fake_cluster: FakeCluster, node: StartNode, tmp_path: Path
) -> None:
    harness, view = await start(node, tmp_path, discovery="all")
    with harness.runtime.logtree.follow(DN) as log:
        leader = await connect(harness, fake_cluster)
        leader.set_node(node_record("node-a", "10.0.0.1", roles=WORKER))
        await served(log, 1)
    await harness.wait_state(DN, State.HEALTHY)  # whatever its roles, known or not
    assert list(labels(view)) == ["node-a"]


async def test_waits_for_the_cluster_with_a_note(node: StartNode, tmp_path: Path) -> None:
    harness, view = await start(node, tmp_path)
    harness.set_roles(MEMBER)
    status = await harness.wait_status(DN, lambda s: s.note == WAITING_NOTE)
    assert status.state == State.NEW
    assert view.targets is None
