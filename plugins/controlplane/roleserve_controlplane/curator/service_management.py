"""The operator-facing ``Management`` service, served by the leader."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from typing_extensions import override

from roleserve_controlplane.curator.credentials import (
    issue_credentials,
    list_credentials,
    revoke_credentials,
)
from roleserve_controlplane.curator.errors import RefusedError, handled
from roleserve_controlplane.curator.leader import (
    LeaderState,
    cluster_directory,
    management_node,
)
from roleserve_controlplane.curator.rebuild import rebuild_member
from roleserve_controlplane.curator.roles import RoleChanges, check_role, has_role
from roleserve_controlplane.curator.validation import check_node_id
from roleserve_controlplane.proto import state_pb2
from roleserve_core import common_pb2, management_pb2, management_pb2_grpc
from roleserve_core.identity import certificate_from_pem, certificate_to_pem
from roleserve_core.limits import MAX_FILTER_ENTRIES, check_count

__all__ = ["ManagementService"]

Context = Any
Member = management_pb2.GetConsensusStatusResponse.Member


class ManagementService(management_pb2_grpc.ManagementServicer):
    """The leader's ``Management`` service."""

    def __init__(self, leader: LeaderState) -> None:
        self.leader = leader
        self.roles = RoleChanges(leader)

    @override
    @handled
    async def GetClusterInfo(
        self, request: management_pb2.GetClusterInfoRequest, context: Context
    ) -> management_pb2.GetClusterInfoResponse:
        await self.leader.cache.ready.wait()
        return management_pb2.GetClusterInfoResponse(
            cluster_directory=cluster_directory(self.leader.cache.nodes.values()),
            ca_certificate=self.leader.authority.ca_pem,
        )

    @override
    @handled
    async def GetNodes(
        self, request: management_pb2.GetNodesRequest, context: Context
    ) -> AsyncIterator[management_pb2.Node]:
        if request.role:
            check_role(request.role)  # else has_role fails on it: UNKNOWN, not INVALID_ARGUMENT
        check_count("node_ids", request.node_ids, MAX_FILTER_ENTRIES)
        check_count("states", request.states, MAX_FILTER_ENTRIES)
        # Sets: a repeated field's ``in`` reads every entry, for every node.
        node_ids, states = set(request.node_ids), set(request.states)
        await self.leader.cache.ready.wait()
        for record in sorted(self.leader.cache.nodes.values(), key=lambda r: r.id):
            if node_ids and record.id not in node_ids:
                continue
            if states and record.state not in states:
                continue
            if request.role and not has_role(record.roles, request.role):
                continue
            yield management_node(record, self.leader.heartbeats, self.leader.node_id)

    @override
    @handled
    async def ApproveNode(
        self, request: management_pb2.ApproveNodeRequest, context: Context
    ) -> management_pb2.ApproveNodeResponse:
        def approve(record: state_pb2.NodeRecord) -> None:
            if record.state == common_pb2.NODE_STATE_DECOMMISSIONED:
                raise RefusedError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"node {record.id} is decommissioned"
                )
            if record.state == common_pb2.NODE_STATE_NEW:
                record.state = common_pb2.NODE_STATE_STANDBY

        # The node's prefix of the cluster network comes with the approval, in its
        # transaction: no approved node is left without one. With none free, the approval
        # is refused (RESOURCE_EXHAUSTED) and the node stays NEW.
        node_id = check_node_id(request.node_id)
        await self.leader.state.update_node(node_id, approve, allocate=self.leader.network)
        return management_pb2.ApproveNodeResponse()

    @override
    @handled
    async def UpdateNodeRoles(
        self, request: management_pb2.UpdateNodeRolesRequest, context: Context
    ) -> management_pb2.UpdateNodeRolesResponse:
        node_id = check_node_id(request.node_id)
        await self.leader.cache.ready.wait()
        roles = await self.roles.apply(node_id, request.changes)
        return management_pb2.UpdateNodeRolesResponse(roles=roles)

    @override
    @handled
    async def GetRegisterTicket(
        self, request: management_pb2.GetRegisterTicketRequest, context: Context
    ) -> management_pb2.GetRegisterTicketResponse:
        return management_pb2.GetRegisterTicketResponse(ticket=await self.leader.state.ticket())

    @override
    @handled
    async def DecommissionNode(
        self, request: management_pb2.DecommissionNodeRequest, context: Context
    ) -> management_pb2.DecommissionNodeResponse:
        def decommission(record: state_pb2.NodeRecord) -> None:
            if record.roles.HasField("consensus_member"):
                raise RefusedError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"node {record.id} is a consensus member; remove that role first",
                )
            record.state = common_pb2.NODE_STATE_DECOMMISSIONED
            # Its roles go with it: role changes need an UP node, so roles kept now could
            # never be taken away, and the node would go on running their workers.
            record.roles.Clear()
            # Its prefix is freed (its key deleted in the same transaction): no node routes
            # to a decommissioned one, and a later node may be given the prefix.
            record.cluster_prefix = ""

        await self.leader.state.update_node(check_node_id(request.node_id), decommission)
        return management_pb2.DecommissionNodeResponse()

    @override
    @handled
    async def GetConsensusStatus(
        self, request: management_pb2.GetConsensusStatusRequest, context: Context
    ) -> management_pb2.GetConsensusStatusResponse:
        members = await self.leader.membership.list()
        alarms = await self.leader.client.alarms()
        leaders = {health.status.leader for health in members if health.status is not None}
        response = management_pb2.GetConsensusStatusResponse()
        for health in members:
            status = Member.LEARNER if health.member.is_learner else Member.FULL
            if health.status is None:
                status = Member.STATUS_UNKNOWN
            member = response.members.add(
                node_id=health.member.name,
                status=status,
                peer_url=health.member.peer_urls[0] if health.member.peer_urls else "",
                leader=health.member.id in leaders,
                alarms=[alarm.kind for alarm in alarms if alarm.member_id == health.member.id],
            )
            if health.status is not None:
                member.db_size = health.status.db_size
                member.db_size_in_use = health.status.db_size_in_use
                member.revision = health.status.revision
        maintenance = self.leader.maintenance
        compaction = maintenance.statistics()
        response.compacted_revision = compaction.compacted_revision
        if compaction.compacted_at:
            response.compacted_at.FromNanoseconds(int(compaction.compacted_at * 1e9))
        response.history_retention.FromNanoseconds(int(maintenance.policy.retention * 1e9))
        return response

    @override
    @handled
    async def RebuildConsensusMember(
        self, request: management_pb2.RebuildConsensusMemberRequest, context: Context
    ) -> management_pb2.RebuildConsensusMemberResponse:
        done = await rebuild_member(self.leader, request.node_id)
        return management_pb2.RebuildConsensusMemberResponse(done=done)

    @override
    @handled
    async def IssueCredentials(
        self, request: management_pb2.IssueCredentialsRequest, context: Context
    ) -> management_pb2.IssueCredentialsResponse:
        certificate = await issue_credentials(
            self.leader.state, self.leader.authority, request.name, request.scope, request.csr
        )
        return management_pb2.IssueCredentialsResponse(
            certificate=certificate_to_pem(certificate), ca_certificate=self.leader.authority.ca_pem
        )

    @override
    @handled
    async def ListCredentials(
        self, request: management_pb2.ListCredentialsRequest, context: Context
    ) -> management_pb2.ListCredentialsResponse:
        response = management_pb2.ListCredentialsResponse()
        for record in await list_credentials(self.leader.state):
            listed = response.credentials.add(
                name=record.name, scope=record.scope, serial=record.serial, revoked=record.revoked
            )
            certificate = certificate_from_pem(record.certificate, f"credentials {record.name}")
            listed.not_after.FromDatetime(certificate.not_valid_after_utc)
        return response

    @override
    @handled
    async def RevokeCredentials(
        self, request: management_pb2.RevokeCredentialsRequest, context: Context
    ) -> management_pb2.RevokeCredentialsResponse:
        await revoke_credentials(self.leader.state, request.name)
        return management_pb2.RevokeCredentialsResponse()
