"""The operator-facing ``Management`` service, over mutual TLS on real etcd.

Each test starts from a bootstrapped cluster (node 0 leads, and is the only consensus member
and Kubernetes controller) and enrols what it needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

import anyio
import grpc
import pytest
from typing_extensions import override

from roleserve_controlplane.consensus import EtcdRequestError
from roleserve_controlplane.curator import roles as roles_module
from roleserve_controlplane.curator.prefixes import ClusterNetwork
from roleserve_controlplane.curator.state import ClusterState, StoredNode
from roleserve_controlplane.proto import state_pb2
from roleserve_controlplane.testing.curator_api import Applicant, CuratorApi, refused
from roleserve_core import common_pb2, curator_pb2, management_pb2, management_pb2_grpc
from roleserve_core.identity import certificate_from_pem
from roleserve_core.testing import DEFAULT_TIMEOUT, poll_until

pytestmark = pytest.mark.anyio

Code = grpc.StatusCode
Change = management_pb2.UpdateNodeRolesRequest.Change
Member = management_pb2.GetConsensusStatusResponse.Member
NEW = common_pb2.NODE_STATE_NEW
STANDBY = common_pb2.NODE_STATE_STANDBY
UP = common_pb2.NODE_STATE_UP
DECOMMISSIONED = common_pb2.NODE_STATE_DECOMMISSIONED


@pytest.fixture
def api(curators) -> CuratorApi:
    return CuratorApi(curators)


def assign(role: str, **parameters: str) -> Change:
    return Change(role=role, assign=True, parameters=parameters)


def unassign(role: str) -> Change:
    return Change(role=role, assign=False)


async def update_roles(api: CuratorApi, node_id: str, *changes: Change) -> common_pb2.NodeRoles:
    """UpdateNodeRoles as the owner; the node's roles after it. With no change, the roles
    stored now."""
    async with api.management() as management:
        request = management_pb2.UpdateNodeRolesRequest(node_id=node_id, changes=changes)
        return (await management.UpdateNodeRoles(request)).roles


async def cluster_info(api: CuratorApi) -> management_pb2.GetClusterInfoResponse:
    async with api.management() as management:
        return await management.GetClusterInfo(management_pb2.GetClusterInfoRequest())


async def consensus(api: CuratorApi) -> list[Member]:
    """The members, asked again while the curator answers "retry": a member just removed
    may have led raft (the leading curator hands raft's leadership to promoted members),
    and the others elect meanwhile."""
    return await poll_until("the consensus members", lambda: _consensus_once(api), lambda _: True)


async def _consensus_once(api: CuratorApi) -> list[Member]:
    async with api.management() as management:
        response = await management.GetConsensusStatus(management_pb2.GetConsensusStatusRequest())
    return sorted(response.members, key=lambda member: member.node_id)


def directory(info: management_pb2.GetClusterInfoResponse) -> dict[str, list[str]]:
    return {node.id: list(node.addresses) for node in info.cluster_directory.nodes}


# -- GetClusterInfo, GetNodes ---------------------------------------------------------------


async def test_cluster_info_lists_the_up_consensus_members_and_the_ca(
    api: CuratorApi, curators
) -> None:
    first, plain = curators.nodes[0], await curators.enrol(1)
    new = await api.register(Applicant())
    await api.settled(lambda nodes: nodes[plain.node_id].status.external_address and new in nodes)
    info = await cluster_info(api)
    assert directory(info) == {first.node_id: [str(first.address)]}
    assert certificate_from_pem(info.ca_certificate) == api.ca


async def test_get_nodes_filters_by_id_state_and_role(api: CuratorApi, curators) -> None:
    first, worker = curators.nodes[0], await curators.enrol(1)
    new = await api.register(Applicant())
    await update_roles(api, worker.node_id, assign("kubernetes_worker"), assign("custom:gpu"))
    await api.settled(lambda nodes: "gpu" in nodes[worker.node_id].roles.custom and new in nodes)
    cases: list[tuple[dict[str, object], set[str]]] = [
        ({}, {first.node_id, worker.node_id, new}),
        ({"node_ids": [worker.node_id]}, {worker.node_id}),
        ({"node_ids": [first.node_id, "node-unknown"]}, {first.node_id}),
        ({"states": [NEW]}, {new}),
        ({"states": [UP, STANDBY]}, {first.node_id, worker.node_id}),
        ({"role": "kubernetes_worker"}, {worker.node_id}),
        ({"role": "consensus_member"}, {first.node_id}),
        ({"role": "custom:gpu"}, {worker.node_id}),
        ({"role": "custom:fpga"}, set()),
        ({"states": [UP], "role": "kubernetes_controller"}, {first.node_id}),
        ({"node_ids": [new], "role": "kubernetes_worker"}, set()),
    ]
    for filters, expected in cases:
        assert set(await api.nodes(**filters)) == expected, filters
    nodes = await api.nodes()
    assert {node.id for node in nodes.values() if node.leader} == {first.node_id}


async def test_get_nodes_refuses_an_unknown_role(api: CuratorApi) -> None:
    with refused(Code.INVALID_ARGUMENT, "unknown role 'kubernetes'"):
        await api.nodes(role="kubernetes")


# -- ApproveNode ----------------------------------------------------------------------------


async def test_approve_node_moves_a_new_node_to_standby_and_leaves_others(
    api: CuratorApi, curators
) -> None:
    up = curators.nodes[0]
    new = await api.register(Applicant())
    await api.approve(new)
    await api.approve(new)  # STANDBY: a no-op
    await api.approve(up.node_id)  # UP: a no-op
    later = await api.register(Applicant())  # once the cache shows it, it shows all before
    await api.settled(lambda nodes: later in nodes)
    nodes = await api.nodes(node_ids=[new, up.node_id])
    assert {node.id: node.state for node in nodes.values()} == {new: STANDBY, up.node_id: UP}


async def test_approve_node_refuses_a_decommissioned_node(api: CuratorApi) -> None:
    new = await api.register(Applicant())
    await api.decommission(new)
    with refused(Code.FAILED_PRECONDITION, f"node {new} is decommissioned"):
        await api.approve(new)


async def _approve(management: management_pb2_grpc.ManagementAsyncStub, node: str) -> object:
    return await management.ApproveNode(management_pb2.ApproveNodeRequest(node_id=node))


async def _update_roles(management: management_pb2_grpc.ManagementAsyncStub, node: str) -> object:
    request = management_pb2.UpdateNodeRolesRequest(node_id=node, changes=[assign("custom:x")])
    return await management.UpdateNodeRoles(request)


async def _decommission(management: management_pb2_grpc.ManagementAsyncStub, node: str) -> object:
    request = management_pb2.DecommissionNodeRequest(node_id=node)
    return await management.DecommissionNode(request)


async def _ticket(management: management_pb2_grpc.ManagementAsyncStub, node: str) -> object:
    request = management_pb2.GetRegisterTicketRequest()
    return await management.GetRegisterTicket(request)


Call: TypeAlias = "Callable[[management_pb2_grpc.ManagementAsyncStub, str], Awaitable[object]]"
NODE_WRITES: dict[str, Call] = {
    "ApproveNode": _approve,
    "UpdateNodeRoles": _update_roles,
    "DecommissionNode": _decommission,
}
"""The calls that change one node (named by the second argument)."""
MANAGE_CLUSTER_CALLS: dict[str, Call] = {**NODE_WRITES, "GetRegisterTicket": _ticket}
NEEDED = {
    "ApproveNode": "MANAGE_NODES",
    "UpdateNodeRoles": "MANAGE_ROLES",
    "DecommissionNode": "MANAGE_NODES",
    "GetRegisterTicket": "MANAGE_CLUSTER",
}
"""The permission each of those needs, which no node holds."""


@pytest.mark.parametrize("method", sorted(NODE_WRITES))
async def test_changes_of_an_unknown_node_are_refused(api: CuratorApi, method: str) -> None:
    async with api.management() as management:
        with refused(Code.NOT_FOUND, "no node node-unknown"):
            await NODE_WRITES[method](management, "node-unknown")


@pytest.mark.parametrize("method", sorted(MANAGE_CLUSTER_CALLS))
async def test_a_node_may_not_call_what_changes_the_cluster(
    api: CuratorApi, curators, method: str
) -> None:
    node = curators.nodes[0]
    call = MANAGE_CLUSTER_CALLS[method]
    async with api.management(node.credentials) as management:
        needed = f"node {node.node_id} lacks {NEEDED[method]}, needed by "
        with refused(Code.PERMISSION_DENIED, needed + f"/roleserve.management.Management/{method}"):
            await call(management, node.node_id)


# -- UpdateNodeRoles ------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["kubernetes_worker", "custom:gpu"])
async def test_a_role_is_assigned_and_removed(api: CuratorApi, curators, role: str) -> None:
    node = await curators.enrol(1)
    assigned = await update_roles(api, node.node_id, assign(role))
    await api.settled(lambda nodes: nodes[node.node_id].roles == assigned)
    listed = set(await api.nodes(role=role))
    removed = await update_roles(api, node.node_id, unassign(role))
    await api.settled(lambda nodes: nodes[node.node_id].roles == removed)
    assert listed == {node.node_id}
    assert assigned != common_pb2.NodeRoles()
    assert removed == common_pb2.NodeRoles()
    assert set(await api.nodes(role=role)) == set()


async def test_custom_role_parameters_are_set_and_replaced(api: CuratorApi, curators) -> None:
    node = await curators.enrol(1)
    first = await update_roles(api, node.node_id, assign("custom:gpu", model="a100", count="2"))
    second = await update_roles(api, node.node_id, assign("custom:gpu", model="h100"))
    assert dict(first.custom["gpu"].parameters) == {"model": "a100", "count": "2"}
    assert dict(second.custom["gpu"].parameters) == {"model": "h100"}
    assert dict((await update_roles(api, node.node_id)).custom["gpu"].parameters) == {
        "model": "h100"
    }


async def test_concurrent_role_changes_of_one_node_all_take_effect(
    api: CuratorApi, curators
) -> None:
    node = await curators.enrol(1)
    names = [f"role{i}" for i in range(5)]
    async with anyio.create_task_group() as tasks:
        for name in names:
            tasks.start_soon(update_roles, api, node.node_id, assign(f"custom:{name}"))
    assert sorted((await update_roles(api, node.node_id)).custom) == names


@pytest.mark.parametrize(
    ("changes", "code", "message"),
    [
        (
            [assign("kubernetes_worker"), assign("kubernetes")],
            Code.INVALID_ARGUMENT,
            "unknown role 'kubernetes'; built-in roles are",
        ),
        (
            [assign("kubernetes_worker"), assign("custom:GPU")],
            Code.INVALID_ARGUMENT,
            "invalid custom role 'custom:GPU'",
        ),
        (
            [assign("kubernetes_worker"), unassign("consensus_member")],
            Code.FAILED_PRECONDITION,
            "kubernetes_controller needs consensus_member",
        ),
    ],
    ids=["unknown-role", "bad-custom-name", "consensus-under-controller"],
)
async def test_a_request_with_a_bad_change_changes_nothing(
    api: CuratorApi, curators, changes: list[Change], code: grpc.StatusCode, message: str
) -> None:
    node = curators.nodes[0]
    before = await update_roles(api, node.node_id)
    with refused(code, message):
        await update_roles(api, node.node_id, *changes)
    after = await update_roles(api, node.node_id)
    assert after == before
    assert not after.HasField("kubernetes_worker")
    assert after.HasField("consensus_member")


async def test_kubernetes_controller_needs_consensus_member(api: CuratorApi, curators) -> None:
    node = await curators.enrol(1)
    with refused(Code.FAILED_PRECONDITION, "kubernetes_controller needs consensus_member"):
        await update_roles(api, node.node_id, assign("kubernetes_controller"))
    assert await update_roles(api, node.node_id) == common_pb2.NodeRoles()


async def test_roles_of_a_node_that_is_not_up_are_refused(api: CuratorApi) -> None:
    new = await api.register(Applicant())
    with refused(Code.FAILED_PRECONDITION, f"node {new} is NODE_STATE_NEW, not UP"):
        await update_roles(api, new, assign("kubernetes_worker"))


async def test_consensus_member_is_assigned_then_removed(api: CuratorApi, curators) -> None:
    first = curators.nodes[0]
    second = await curators.add_consensus(1)
    await api.settled(lambda nodes: nodes[second.node_id].roles.HasField("consensus_member"))
    joined, info = await consensus(api), await cluster_info(api)
    async with api.local(Applicant().ephemeral(api.ca), second) as local:
        call = local.GetCurrentLeader(curator_pb2.GetCurrentLeaderRequest())
        with anyio.fail_after(DEFAULT_TIMEOUT):
            told = await call.read()
        call.cancel()
    roles = await update_roles(api, second.node_id, unassign("consensus_member"))
    await api.settled(lambda nodes: not nodes[second.node_id].roles.HasField("consensus_member"))
    left, info_after = await consensus(api), await cluster_info(api)

    assert [(m.node_id, m.status) for m in joined] == sorted(
        [(first.node_id, Member.FULL), (second.node_id, Member.FULL)]
    )
    assert sum(m.leader for m in joined) == 1
    assert directory(info) == {
        first.node_id: [str(first.address)],
        second.node_id: [str(second.address)],
    }
    assert told == curator_pb2.GetCurrentLeaderResponse(
        leader_node_id=first.node_id,
        leader_host=str(first.address),
        leader_port=7835,
        this_node_id=second.node_id,
    )
    assert not roles.HasField("consensus_member")
    assert [m.node_id for m in left] == [first.node_id]
    assert directory(info_after) == {first.node_id: [str(first.address)]}


async def test_the_leader_leaves_consensus_in_one_change(api: CuratorApi, curators) -> None:
    """The leader's own node leaves: its client reaches only its own etcd member, the one
    removed, so the record is written through the members that remain. It used to answer
    "retry" with the member gone and the role still recorded."""
    leader = curators.nodes[0]
    others = [await curators.add_consensus(1), await curators.add_consensus(2)]
    await api.settled(
        lambda nodes: all(nodes[n.node_id].roles.HasField("consensus_member") for n in others)
    )
    roles = await update_roles(
        api, leader.node_id, unassign("kubernetes_controller"), unassign("consensus_member")
    )
    assert not roles.HasField("consensus_member")
    await curators.leave_consensus(leader)  # as its node does on the role's removal
    # The next leader is one of the others, and the record it reads says what the answer
    # said.
    node_ids = sorted(node.node_id for node in others)
    await poll_until(
        "a curator of the members that remain leads",
        lambda: _leads_one_of(curators, node_ids),
        timeout=DEFAULT_TIMEOUT,
    )
    stored = (await api.nodes(node_ids=[leader.node_id]))[leader.node_id]
    assert not stored.roles.HasField("consensus_member")
    assert sorted(m.node_id for m in await consensus(api)) == node_ids


async def _leads_one_of(curators, node_ids: list[str]) -> bool:
    return (await curators.leader()).node_id in node_ids


async def test_a_change_half_done_says_so_and_the_same_change_completes_it(
    api: CuratorApi, curators, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The etcd member is gone, the record write fails: the answer says the change is half
    done and how to complete it, and doing so completes it."""
    leaving = await curators.add_consensus(1)
    await api.settled(lambda nodes: nodes[leaving.node_id].roles.HasField("consensus_member"))

    class StoreDown(ClusterState):
        @override
        async def update_node(
            self,
            node_id: str,
            change: Callable[[state_pb2.NodeRecord], None],
            *,
            allocate: ClusterNetwork | None = None,
            read: StoredNode | None = None,
        ) -> state_pb2.NodeRecord:
            raise EtcdRequestError("put /nodes/...: the store went away (injected)")

    monkeypatch.setattr(roles_module, "ClusterState", StoreDown)
    with refused(Code.UNAVAILABLE, f"half done: the etcd member of {leaving.node_id} was removed"):
        await update_roles(api, leaving.node_id, unassign("consensus_member"))
    assert [m.node_id for m in await consensus(api)] == [curators.nodes[0].node_id]
    stored = await update_roles(api, leaving.node_id)
    assert stored.HasField("consensus_member")  # the role is still recorded
    monkeypatch.undo()
    roles = await update_roles(api, leaving.node_id, unassign("consensus_member"))
    assert not roles.HasField("consensus_member")


# -- GetRegisterTicket, DecommissionNode, GetConsensusStatus --------------------------------


async def test_the_register_ticket_is_the_one_register_node_accepts(api: CuratorApi) -> None:
    ticket = await api.ticket()
    applicant = Applicant()
    async with api.curator(applicant.ephemeral(api.ca)) as curator:
        registered = await curator.RegisterNode(api.register_request(applicant, ticket))
    assert len(ticket) == 32
    assert await api.ticket() == ticket
    assert registered.node_id == applicant.node_id


async def test_a_consensus_member_cannot_be_decommissioned(api: CuratorApi, curators) -> None:
    node = curators.nodes[0]
    with refused(Code.FAILED_PRECONDITION, "is a consensus member; remove that role first"):
        await api.decommission(node.node_id)


async def test_a_plain_node_is_decommissioned_without_its_roles(api: CuratorApi, curators) -> None:
    node = await curators.enrol(1)
    await update_roles(api, node.node_id, assign("kubernetes_worker"), assign("custom:backup"))
    await api.decommission(node.node_id)
    await api.settled(lambda nodes: nodes[node.node_id].state == DECOMMISSIONED)
    assert set(await api.nodes(states=[DECOMMISSIONED])) == {node.node_id}
    shown = (await api.nodes(node_ids=[node.node_id]))[node.node_id]
    assert shown.roles == common_pb2.NodeRoles()
    # Nor can it be given any again.
    with refused(Code.FAILED_PRECONDITION, f"node {node.node_id} is NODE_STATE_DECOMMISSIONED"):
        await update_roles(api, node.node_id, assign("kubernetes_worker"))


async def test_consensus_status_of_a_new_cluster_is_its_first_node(
    api: CuratorApi, curators
) -> None:
    node = curators.nodes[0]
    [member] = await consensus(api)
    assert member.db_size >= member.db_size_in_use > 0
    assert member.revision > 1  # the bootstrap wrote
    member.ClearField("db_size")
    member.ClearField("db_size_in_use")
    member.ClearField("revision")
    assert member == Member(
        node_id=node.node_id,
        status=Member.FULL,
        peer_url=f"https://{node.address}:7837",
        leader=True,
    )


# -- RebuildConsensusMember -----------------------------------------------------------------


async def rebuild(api: CuratorApi, node_id: str) -> str:
    async with api.management() as management:
        request = management_pb2.RebuildConsensusMemberRequest(node_id=node_id)
        return (await management.RebuildConsensusMember(request)).done


async def test_rebuild_is_refused_without_the_role_and_for_the_leaders_own_member(
    api: CuratorApi, curators
) -> None:
    leader = curators.nodes[0]
    plain = await curators.enrol(1)
    with refused(Code.NOT_FOUND, "no node node-unknown"):
        await rebuild(api, "node-unknown")
    with refused(
        Code.FAILED_PRECONDITION,
        f"node {plain.node_id} is not a consensus member: it has no etcd data to rebuild",
    ):
        await rebuild(api, plain.node_id)
    with refused(Code.FAILED_PRECONDITION, f"node {leader.node_id}'s curator leads the cluster"):
        await rebuild(api, leader.node_id)
    assert [m.node_id for m in await consensus(api)] == [leader.node_id]


async def test_rebuild_is_refused_when_the_quorum_would_go(api: CuratorApi, curators) -> None:
    """Three voters, one down: removing a second would leave one of two voters."""
    leader = curators.nodes[0]
    second, third = await curators.add_consensus(1), await curators.add_consensus(2)
    assert await curators.leader() is leader
    await curators.crash(third)
    with refused(
        Code.FAILED_PRECONDITION,
        f"not rebuilding node {second.node_id}: cannot remove {second.node_id} (",
    ):
        await rebuild(api, second.node_id)
    with refused(
        Code.FAILED_PRECONDITION,
        "1 of the 2 voting members left are reachable, and a quorum needs 2",
    ):
        await rebuild(api, second.node_id)
    statuses = {m.node_id: m.status for m in await consensus(api)}
    assert statuses == {
        leader.node_id: Member.FULL,
        second.node_id: Member.FULL,
        third.node_id: Member.STATUS_UNKNOWN,
    }
