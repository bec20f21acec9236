"""Three curators; two of their nodes crash and stay down; the survivor says there is no
quorum, naming who answers and who does not (``curator.quorum``), instead of timing out
its reads."""

from __future__ import annotations

import anyio
import pytest

from roleserve_controlplane.curator.quorum import MemberReach, QuorumReport
from roleserve_controlplane.testing import CuratorCluster, CuratorNode
from roleserve_core import curator_pb2, curator_pb2_grpc
from roleserve_core.testing import SupervisorRunner, poll_until

pytestmark = pytest.mark.anyio


async def first_answer(
    curators: CuratorCluster, node: CuratorNode
) -> curator_pb2.GetCurrentLeaderResponse:
    """The first answer of ``node``'s curator to GetCurrentLeader."""
    assert node.credentials is not None
    async with curators.channel(node, node.credentials) as channel:
        stream = curator_pb2_grpc.CuratorLocalStub(channel).GetCurrentLeader(
            curator_pb2.GetCurrentLeaderRequest()
        )
        try:
            with anyio.fail_after(5):
                return await anext(aiter(stream))
        finally:
            stream.cancel()


async def lose(curators: CuratorCluster, runner: SupervisorRunner, node: CuratorNode) -> None:
    """``node`` crashes and stays down: its etcd member is SIGKILLed and not restarted."""
    assert node.member is not None
    supervisor = node.member.supervisor
    await curators.crash(node)
    await runner.stop(supervisor)


async def test_the_survivor_of_two_crashes_names_the_members_that_answer(
    curators: CuratorCluster, supervisor_runner: SupervisorRunner
) -> None:
    first = curators.nodes[0]
    second = await curators.add_consensus(1)
    third = await curators.add_consensus(2)
    assert not (await first_answer(curators, first)).HasField("no_quorum")
    await lose(curators, supervisor_runner, second)
    await lose(curators, supervisor_runner, third)

    async def look() -> curator_pb2.GetCurrentLeaderResponse:
        return await first_answer(curators, first)

    answer = await poll_until(
        "the survivor says there is no quorum", look, lambda a: a.HasField("no_quorum"), timeout=30
    )
    assert answer.leader_node_id == ""
    assert answer.this_node_id == first.node_id
    supervisor = first.supervisor
    assert supervisor is not None

    async def note() -> str:
        assert supervisor is not None
        return supervisor.status_of("root").note

    await poll_until(
        "the curator's note says there is no quorum",
        note,
        lambda seen: seen.endswith(": no quorum (1 of 3 members answer)"),
        timeout=30,
    )
    # Its campaign's lease grant times out without a quorum: it waits, still serving,
    # rather than failing (a restart would refuse connections for its backoff).
    await poll_until(
        "the curator waits for its members after its term failed",
        note,
        lambda seen: seen == "waiting: no quorum (1 of 3 members answer)",
        timeout=30,
    )
    assert supervisor.status_of("root").failures == 0
    assert (await first_answer(curators, first)).HasField("no_quorum")
    seen = {(m.node_id, m.address, m.answers) for m in answer.no_quorum.members}
    assert seen == {
        (first.node_id, str(first.address), True),
        (second.node_id, str(second.address), False),
        (third.node_id, str(third.address), False),
    }


def test_a_report_says_how_many_answer_and_names_the_silent_ones() -> None:
    report = QuorumReport(
        (
            MemberReach("node-a", "127.0.0.11", True),
            MemberReach("node-b", "127.0.0.12", False),
            MemberReach("node-c", "127.0.0.13", False),
        )
    )
    assert report.summary() == "no quorum (1 of 3 members answer)"
    assert report.describe() == (
        "no quorum (1 of 3 members answer): answering node-a; "
        "not answering node-b 127.0.0.12, node-c 127.0.0.13"
    )
    assert [m.node_id for m in report.to_proto().members if m.answers] == ["node-a"]
