"""The leading curator maintains etcd on its clock: a churn of role changes is compacted once
older than the cluster's history retention and defragmented away, nodes still watch the
right state, and ``ctl consensus``'s data shows the sizes, the compaction and a NOSPACE
alarm until maintenance clears it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from roleserve_controlplane.consensus import (
    EtcdClient,
    MaintenancePolicy,
    RevisionCompactedError,
)
from roleserve_controlplane.curator.state import node_key
from roleserve_controlplane.testing import (
    CuratorCluster,
    CuratorNode,
    EtcdCluster,
    change_roles,
    fill_database,
)
from roleserve_core import curator_pb2, curator_pb2_grpc, management_pb2
from roleserve_core.testing import FakeClock, poll_until

pytestmark = pytest.mark.anyio

RETENTION = 60.0
"""The test cluster's history retention (fake seconds): a pass every 15."""
PERIOD = MaintenancePolicy(retention=RETENTION).period
CHANGES = 1000


@pytest.fixture
async def curators(cluster: EtcdCluster, fake_clock: FakeClock) -> AsyncIterator[CuratorCluster]:
    """A bootstrapped cluster whose curators keep ``RETENTION`` of history, on the fake
    clock, and defragment at a fifth of a database free."""
    policy = MaintenancePolicy(defrag_free_bytes=0, defrag_free_ratio=0.2)
    async with CuratorCluster(
        cluster, history_retention=RETENTION, clock=fake_clock, maintenance=policy
    ) as curators:
        await curators.bootstrap()
        await fake_clock.wait_sleepers(1)  # the leader's first pass is done
        yield curators


def etcd_client(curators: CuratorCluster) -> EtcdClient:
    """A client of node 0's member, with its credentials (of the curators' consensus CA)."""
    member = curators.nodes[0].member
    assert member is not None
    return member.client()


async def next_pass(clock: FakeClock) -> None:
    """Let one period pass, and wait until the maintenance pass it starts is done."""
    clock.advance(PERIOD)
    await clock.wait_sleepers(1)


async def consensus_status(curators: CuratorCluster) -> management_pb2.GetConsensusStatusResponse:
    """What ``ctl consensus`` shows."""
    channel, management = curators.management(await curators.leader())
    async with channel:
        response: management_pb2.GetConsensusStatusResponse = await management.GetConsensusStatus(
            management_pb2.GetConsensusStatusRequest()
        )
        return response


async def watched_churn_parameter(curators: CuratorCluster, node: CuratorNode) -> str:
    """The churn parameter of ``node`` as a new Watch stream of the node's own gives it."""
    assert node.credentials is not None
    leader = await curators.leader()
    async with curators.channel(leader, node.credentials) as channel:
        request = curator_pb2.WatchRequest()
        request.node_in_cluster.node_id = node.node_id
        stream = curator_pb2_grpc.CuratorStub(channel).Watch(request)
        async for event in stream:
            stream.cancel()
            return str(event.nodes[0].roles.custom["churn"].parameters["n"])
    raise AssertionError("the Watch ended without a backlog")


async def test_a_churn_of_role_changes_is_compacted_and_defragmented_on_the_leaders_clock(
    curators: CuratorCluster, cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    worker = await curators.enrol(1)
    async with etcd_client(curators) as client:
        first = (await client.get(node_key(worker.node_id))) or pytest.fail("no record")
        await change_roles(curators, worker, CHANGES)
        churned = await consensus_status(curators)
        await next_pass(fake_clock)  # remembers the revision after the churn
        for _ in range(3):
            await next_pass(fake_clock)
        assert (await consensus_status(curators)).compacted_revision < churned.members[0].revision
        await next_pass(fake_clock)  # the churn is older than the retention now
        status = await consensus_status(curators)
        with pytest.raises(RevisionCompactedError):
            await client.get(node_key(worker.node_id), revision=first.mod_revision)
    assert status.compacted_revision >= churned.members[0].revision
    assert status.history_retention.seconds == RETENTION
    assert status.members[0].db_size < churned.members[0].db_size / 2, (churned, status)
    assert await watched_churn_parameter(curators, worker) == str(CHANGES - 1)


async def test_ctl_consensus_shows_the_nospace_alarm_until_maintenance_clears_it(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    cluster.quota_backend_bytes = 4 * 1024**2
    policy = MaintenancePolicy(quota_backend_bytes=cluster.quota_backend_bytes)
    async with CuratorCluster(
        cluster, history_retention=RETENTION, clock=fake_clock, maintenance=policy
    ) as curators:
        await curators.bootstrap()
        await fake_clock.wait_sleepers(1)
        async with etcd_client(curators) as client:
            await fill_database(client)
        full = await consensus_status(curators)
        assert [list(member.alarms) for member in full.members] == [["NOSPACE"]]
        for _ in range(4):
            await next_pass(fake_clock)

        async def after_a_pass() -> management_pb2.GetConsensusStatusResponse:
            await next_pass(fake_clock)
            return await consensus_status(curators)

        cleared = await poll_until(
            "the alarm is cleared", after_a_pass, lambda status: not status.members[0].alarms
        )
        assert cleared.members[0].db_size < full.members[0].db_size
