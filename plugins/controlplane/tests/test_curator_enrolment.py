"""The curator end to end: a bootstrapped cluster enrols nodes through its API."""

from __future__ import annotations

import contextlib
import logging

import anyio
import grpc
import pytest

from roleserve_controlplane.consensus import (
    Election,
    EtcdRequestError,
    KeyValue,
    Leader,
)
from roleserve_controlplane.curator.service_not_leading import not_leading, refusal
from roleserve_controlplane.curator.state import LEADER_PREFIX
from roleserve_controlplane.proto import state_pb2
from roleserve_controlplane.testing import CuratorCluster
from roleserve_core import common_pb2, management_pb2
from roleserve_core.rpc import LEADER_STARTING_METADATA

pytestmark = pytest.mark.anyio


async def test_a_node_enrols_and_becomes_a_consensus_member(curators: CuratorCluster) -> None:
    first = curators.nodes[0]
    second = await curators.add_consensus(1)
    channel, management = curators.management(first)
    async with channel:
        nodes = [n async for n in management.GetNodes(management_pb2.GetNodesRequest())]
        consensus = await management.GetConsensusStatus(management_pb2.GetConsensusStatusRequest())
    assert {node.id: node.state for node in nodes} == {
        first.node_id: common_pb2.NODE_STATE_UP,
        second.node_id: common_pb2.NODE_STATE_UP,
    }
    assert [node.id for node in nodes if node.leader] == [first.node_id]
    members = {member.node_id: member.status for member in consensus.members}
    full = management_pb2.GetConsensusStatusResponse.Member.FULL
    assert members == {first.node_id: full, second.node_id: full}
    assert second.curator is not None
    assert second.curator.role.get_nowait() == "following"


async def test_a_follower_refuses_the_leaders_calls_naming_the_leader(
    curators: CuratorCluster,
) -> None:
    """Said as it is: this curator is not the leader, the leader is that one, there. It
    said "the leader changed", which no change had made true."""
    first = curators.nodes[0]
    second = await curators.add_consensus(1)
    channel, management = curators.management(second)
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.value.details() == (
        f"curator {second.node_id} is not the leader; the leader is curator "
        f"{first.node_id} at {first.address}:7835: call it there"
    )


class _Election:
    """An election that answers ``leader()`` with ``answer``, or raises it."""

    def __init__(self, answer: Leader | Exception | None) -> None:
        self.answer = answer

    async def leader(self) -> Leader | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _leader(node_id: str) -> Leader:
    value = state_pb2.LeaderValue(node_id=node_id, host="127.0.0.9", port=7835)
    return Leader(b"/leader/1", value.SerializeToString(), 1)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            _leader("node-b"),
            "curator node-a is not the leader; the leader is curator node-b at "
            "127.0.0.9:7835: call it there",
        ),
        (
            None,
            "curator node-a is not the leader, and no curator leads now (an election is "
            "under way, or the consensus has no quorum); retry, asking any curator for the "
            "leader (GetCurrentLeader)",
        ),
        (
            EtcdRequestError("etcd range /leader/: deadline exceeded"),
            "curator node-a is not "
            "the leader, and cannot tell who is (etcd range /leader/: deadline exceeded); ask "
            "another curator for the leader (GetCurrentLeader)",
        ),
        (
            _leader("node-a"),
            "curator node-a was just elected and starts serving as the leader; retry",
        ),
    ],
    ids=["another-leads", "none-leads", "etcd-silent", "just-elected"],
)
async def test_a_followers_refusal_says_what_it_knows_of_the_leader(
    answer: Leader | Exception | None, said: str
) -> None:
    assert await not_leading("node-a", _Election(answer)) == said


@pytest.mark.parametrize(
    ("answer", "marked"),
    [(_leader("node-a"), True), (_leader("node-b"), False), (None, False)],
    ids=["just-elected", "another-leads", "none-leads"],
)
async def test_only_a_just_elected_curators_refusal_is_marked_to_retry_at_once(
    answer: Leader | None, marked: bool
) -> None:
    """The mark (``LEADER_STARTING_METADATA``) tells a node that the address is right and
    will serve in a moment: it retries there at once instead of waiting for a new leader."""
    message, metadata = await refusal("node-a", _Election(answer))
    assert message == await not_leading("node-a", _Election(answer))
    assert metadata == (LEADER_STARTING_METADATA if marked else ())


async def test_a_follower_whose_campaign_lease_lapsed_follows_on_quietly(
    curators: CuratorCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A follower resumed after a pause finds its campaign lease expired. It never led: it
    campaigns again and keeps following, without failing and without a word above DEBUG.
    It logged an ERROR "could not be renewed in time: leadership lost", then failed."""
    second = await curators.add_consensus(1)
    assert second.supervisor is not None
    assert second.curator is not None
    assert second.member is not None
    async with second.member.client() as client:
        election = Election(client, LEADER_PREFIX)
        lapsed = await _campaign_key(election, second.node_id)
        caplog.clear()
        await client.revoke_lease(lapsed.lease)  # as etcd expires a paused follower's
        await _campaign_key(election, second.node_id, other_than=lapsed.lease)
    assert second.curator.role.get_nowait() == "following"
    assert second.supervisor.status_of("root").failures == 0
    said = [r.getMessage() for r in caplog.records if r.levelno > logging.INFO]
    assert [line for line in said if "lease" in line or "leader" in line] == []


async def _campaign_key(election: Election, node_id: str, *, other_than: int = 0) -> KeyValue:
    """The campaign key of ``node_id``'s curator, on a lease other than ``other_than``,
    once there is one (up to 30 s)."""
    with anyio.fail_after(30):
        while True:
            keys, revision = await election.candidates()
            for kv in keys:
                if _campaigner(kv) == node_id and kv.lease != other_than:
                    return kv
            watch = election.client.watch_prefix(LEADER_PREFIX, start_revision=revision + 1)
            async with contextlib.aclosing(watch):
                await anext(watch)  # something changed: look again


def _campaigner(key: KeyValue) -> str:
    """The node ID a campaign key of the curators' election names."""
    value = state_pb2.LeaderValue()
    value.ParseFromString(key.value)
    return value.node_id
