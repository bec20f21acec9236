"""Three curators; the leader's node crashes; a follower takes over and nothing is lost."""

from __future__ import annotations

import contextlib

import anyio
import grpc
import pytest

from roleserve_controlplane.consensus import Election, EtcdClient, Leader, Leadership
from roleserve_controlplane.curator.curator import Curator
from roleserve_controlplane.curator.leader import LeaderState
from roleserve_controlplane.curator.state import LEADER_PREFIX
from roleserve_controlplane.proto import state_pb2
from roleserve_controlplane.testing import CuratorCluster, CuratorNode, EtcdCluster
from roleserve_controlplane.testing.curator import TEST_TTL
from roleserve_core import State, common_pb2, curator_pb2, curator_pb2_grpc, management_pb2
from roleserve_core.identity import Credentials
from roleserve_core.rpc import leader_starting
from roleserve_core.testing import wait_for_value

pytestmark = pytest.mark.anyio


async def node_ids_watched(
    curators: CuratorCluster, node: CuratorNode, via: CuratorNode
) -> set[str]:
    """The nodes in the snapshot of a Watch of every node, from ``via``'s curator."""
    assert node.credentials is not None
    request = curator_pb2.WatchRequest(nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster())
    seen: set[str] = set()
    async with curators.channel(via, node.credentials) as channel:
        stream = curator_pb2_grpc.CuratorStub(channel).Watch(request)
        with anyio.fail_after(10):
            async for event in stream:
                seen.update(n.id for n in event.nodes)
                if event.progress == curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED:
                    break
        stream.cancel()
    return seen


async def heartbeat_interval(credentials: Credentials, channel_of: object) -> float:
    """One heartbeat round trip; returns the interval the curator asks for."""
    assert callable(channel_of)
    async with channel_of(credentials) as channel:
        stream = curator_pb2_grpc.CuratorStub(channel).Heartbeat(
            iter([curator_pb2.HeartbeatRequest()])
        )
        with anyio.fail_after(10):
            response = await anext(aiter(stream))
        stream.cancel()
    return float(response.interval.seconds)


async def test_a_follower_takes_over_from_a_crashed_leader(curators: CuratorCluster) -> None:
    first = curators.nodes[0]
    second = await curators.add_consensus(1)
    third = await curators.add_consensus(2)
    plain = await curators.enrol(3)
    assert await curators.leader() is first
    before = await node_ids_watched(curators, plain, via=first)
    assert before == {n.node_id for n in (first, second, third, plain)}
    channel, management = curators.management(first)
    async with channel:
        request = management_pb2.GetNodesRequest()
        prefixes = {n.id: n.cluster_prefix async for n in management.GetNodes(request)}
    assert len(set(prefixes.values())) == 4
    assert all(prefixes.values())

    # A follower tells clients who leads, and keeps telling them.
    assert second.credentials is not None
    send, leaders = anyio.create_memory_object_stream[str](10)
    async with (
        curators.channel(second, second.credentials) as channel,
        anyio.create_task_group() as tasks,
        leaders,
    ):

        async def follow_leader() -> None:
            """As a client does: if the curator asked changes role, its server restarts
            and the stream ends; ask again."""
            local = curator_pb2_grpc.CuratorLocalStub(channel)
            async with send:
                while True:
                    request = curator_pb2.GetCurrentLeaderRequest()
                    stream = local.GetCurrentLeader(request, wait_for_ready=True)
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        async for answer in stream:
                            await send.send(answer.leader_node_id)

        tasks.start_soon(follow_leader)
        with anyio.fail_after(10):
            assert await leaders.receive() == first.node_id
        await curators.crash(first)
        with anyio.fail_after(3 * TEST_TTL + 10):
            new = await curators.leader()
            assert new in (second, third)
            while await leaders.receive() != new.node_id:
                pass
        tasks.cancel_scope.cancel()

    # Watches and heartbeats resume against the new leader; no node record is lost.
    assert await node_ids_watched(curators, plain, via=new) == before
    assert plain.credentials is not None
    interval = await heartbeat_interval(plain.credentials, lambda c: curators.channel(new, c))
    assert interval == curators.heartbeat_interval
    channel, management = curators.management(new)
    async with channel:
        nodes = {n.id: n async for n in management.GetNodes(management_pb2.GetNodesRequest())}
    assert set(nodes) == before
    # The new leader keeps every node's prefix (it allocates only to nodes lacking one).
    assert {n.id: n.cluster_prefix for n in nodes.values()} == prefixes
    assert nodes[plain.node_id].health == management_pb2.Node.HEALTHY
    assert nodes[plain.node_id].status.external_address == str(plain.address)
    assert nodes[new.node_id].leader
    assert all(n.state == common_pb2.NODE_STATE_UP for n in nodes.values())

    # The follower left answers the leader's services UNAVAILABLE, "not the leader": what a
    # client still holding a channel to a former leader gets (an expected failure, after
    # which it asks who leads), not UNIMPLEMENTED, which read as a bug.
    follower = second if new is third else third
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await heartbeat_interval(plain.credentials, lambda c: curators.channel(follower, c))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert (refused.value.details() or "").startswith(
        f"curator {follower.node_id} is not the leader; the leader is curator {new.node_id} at "
    )
    channel, management = curators.management(follower)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_restarted_curator_is_healthy_again(curators: CuratorCluster) -> None:
    """The supervisor restarts a curator (after a failure, or asked to): once it follows or
    leads again it says HEALTHY, as it did the first time."""
    node = curators.nodes[0]
    supervisor = node.supervisor
    assert supervisor is not None
    with anyio.fail_after(30):
        await supervisor.wait_state("root", State.HEALTHY)
        supervisor.restart("root")
        restarted = await supervisor.wait_status(
            "root", lambda status: status.restarts >= 1 and status.state is State.HEALTHY
        )
        assert restarted.note in {"following", "leading"}
        assert await curators.leader() is node  # its old lease expires; it leads again
    assert supervisor.status_of("root").state is State.HEALTHY


async def test_a_just_elected_curator_says_retry_marked_until_its_leader_serves(
    curators: CuratorCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the new leader loads its state (held here), its follower's server answers
    the leader's services "just elected; retry", marked ``LEADER_STARTING_METADATA``: a
    node keeps a working connection to the right address and starts over once the leader's
    server replaces it. It stopped that server first, and nodes were refused meanwhile,
    their channels backing off behind the leader's start."""
    first = curators.nodes[0]
    second = await curators.add_consensus(1)
    third = await curators.add_consensus(2)
    plain = await curators.enrol(3)
    assert plain.credentials is not None
    assert await curators.leader() is first
    elected: list[Curator] = []
    loading, loaded = anyio.Event(), anyio.Event()
    load = Curator._leader_state

    async def held(self: Curator, client: EtcdClient, leadership: Leadership) -> LeaderState:
        elected.append(self)
        loading.set()
        await loaded.wait()
        return await load(self, client, leadership)

    monkeypatch.setattr(Curator, "_leader_state", held)
    await curators.crash(first)
    with anyio.fail_after(3 * TEST_TTL + 10):
        await loading.wait()
    [new] = [node for node in (second, third) if node.curator is elected[0]]

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await heartbeat_interval(plain.credentials, lambda c: curators.channel(new, c))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.value.details() == (
        f"curator {new.node_id} was just elected and starts serving as the leader; retry"
    )
    assert leader_starting(refused.value)

    loaded.set()
    assert new.curator is not None
    await wait_for_value(new.curator.role, lambda role: role == "leading")
    interval = await heartbeat_interval(plain.credentials, lambda c: curators.channel(new, c))
    assert interval == curators.heartbeat_interval


async def test_a_leader_stopped_cleanly_hands_over_at_once(cluster: EtcdCluster) -> None:
    """A node stopping cleanly (SIGTERM) cancels its etcd member and its curator at once.
    The member serves on until the curator has ended, so the leader's revoke of its lease
    reaches etcd and a follower leads at once, long before the lease could expire. The
    member used to stop first: the revoke failed, and the cluster had no leader for a TTL
    (7 s of a default lease on a real node, for every ``cluster down`` or restart)."""
    async with CuratorCluster(cluster, lease_ttl=LONG_TTL) as curators:
        first = await curators.bootstrap()
        second = await curators.add_consensus(1)
        third = await curators.add_consensus(2)
        assert await curators.leader() is first
        await curators.stop(first)
        assert second.member is not None
        async with second.member.client() as client:
            leader = await Election(client, LEADER_PREFIX).leader()
        # Read right after the stop: the old leader's key is gone, not left to expire.
        assert leader is None or _node_of(leader) != first.node_id
        new = await curators.leader(timeout=LONG_TTL / 2)
        assert new in (second, third)


LONG_TTL = 60
"""A lease no test waits out: a follower that leads within it was handed the lead."""


def _node_of(leader: Leader) -> str:
    """The node ID a campaign key's value names."""
    return state_pb2.LeaderValue.FromString(leader.value).node_id
