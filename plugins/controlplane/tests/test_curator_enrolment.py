"""The curator end to end: a bootstrapped cluster enrols nodes through its API."""

from __future__ import annotations

import pytest

from roleserve_controlplane.testing import CuratorCluster
from roleserve_core import common_pb2, management_pb2

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
