"""Assigning and removing roles, with what the consensus role takes beyond a record write.

::

    set consensus_member     node must be UP with an address
                             → member certificate for the node's key (consensus CA)
                             → etcd learner at https://<address>:7837 (reused if present)
                             → role filled: consensus CA, the certificate, every member
    unset consensus_member   refused while kubernetes_controller is set
                             → etcd member removed first (refused if quorum would go)
    kubernetes_controller    needs consensus_member (in the roles after the change)
    custom:<name>            any valid name, with string parameters

All changes of one request are checked before anything happens, so a request with one bad
change changes nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import grpc

from roleserve_controlplane.consensus import DEFAULT_PEER_PORT, Member
from roleserve_controlplane.curator.errors import RefusedError
from roleserve_controlplane.curator.leader import LeaderState, peer_url
from roleserve_controlplane.proto import state_pb2
from roleserve_core.identity import certificate_to_pem, public_key_from_der
from roleserve_core.proto import common_pb2, management_pb2
from roleserve_core.roles import CUSTOM_ROLE_NAME

__all__ = ["BUILTIN_ROLES", "RoleChanges", "has_role"]

BUILTIN_ROLES = ("consensus_member", "kubernetes_controller", "kubernetes_worker")

Change = management_pb2.UpdateNodeRolesRequest.Change


def _refuse(code: grpc.StatusCode, message: str) -> RefusedError:
    return RefusedError(code, message)


def has_role(roles: common_pb2.NodeRoles, role: str) -> bool:
    """Whether ``roles`` hold ``role`` (a built-in name or ``custom:<name>``)."""
    if role.startswith("custom:"):
        return role.removeprefix("custom:") in roles.custom
    return roles.HasField(role)  # type: ignore[arg-type]


def _check_name(role: str) -> None:
    if role.startswith("custom:"):
        if not CUSTOM_ROLE_NAME.fullmatch(role.removeprefix("custom:")):
            raise _refuse(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"invalid custom role {role!r}: lower case letters, digits and '_.-', "
                "at most 63 characters",
            )
    elif role not in BUILTIN_ROLES:
        raise _refuse(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"unknown role {role!r}; built-in roles are {', '.join(BUILTIN_ROLES)}, "
            "third-party roles are written custom:<name>",
        )


def _apply(roles: common_pb2.NodeRoles, change: Change) -> None:
    """A change of any role but consensus_member."""
    if change.role.startswith("custom:"):
        name = change.role.removeprefix("custom:")
        if change.assign:
            roles.custom[name].parameters.clear()
            roles.custom[name].parameters.update(change.parameters)
        else:
            roles.custom.pop(name, None)
    elif change.assign:
        getattr(roles, change.role).SetInParent()
    else:
        roles.ClearField(change.role)  # type: ignore[arg-type]


class RoleChanges:
    """``Management.UpdateNodeRoles``, done by the leader."""

    def __init__(self, leader: LeaderState, peer_port: int = DEFAULT_PEER_PORT) -> None:
        self.leader = leader
        self.peer_port = peer_port

    async def apply(self, node_id: str, changes: Sequence[Change]) -> common_pb2.NodeRoles:
        """Check every change, then make them; returns the node's new roles."""
        record = self.leader.cache.get(node_id)
        if record is None:
            raise _refuse(grpc.StatusCode.NOT_FOUND, f"no node {node_id}")
        if record.state != common_pb2.NODE_STATE_UP:
            state = common_pb2.NodeState.Name(record.state)
            raise _refuse(grpc.StatusCode.FAILED_PRECONDITION, f"node {node_id} is {state}, not UP")
        for change in changes:
            _check_name(change.role)
        target = common_pb2.NodeRoles()
        target.CopyFrom(record.roles)
        consensus = [change for change in changes if change.role == "consensus_member"]
        for change in changes:
            if change.role != "consensus_member":
                _apply(target, change)
        wants_consensus = consensus[-1].assign if consensus else target.HasField("consensus_member")
        if target.HasField("kubernetes_controller") and not wants_consensus:
            raise _refuse(
                grpc.StatusCode.FAILED_PRECONDITION,
                "kubernetes_controller needs consensus_member; keep or assign both",
            )
        had_consensus = record.roles.HasField("consensus_member")
        if wants_consensus and not had_consensus:
            target.consensus_member.CopyFrom(await self._join_consensus(record))
        elif had_consensus and not wants_consensus:
            await self._leave_consensus(record)
            target.ClearField("consensus_member")

        def replace(stored: state_pb2.NodeRecord) -> None:
            stored.roles.CopyFrom(target)

        return (await self.leader.state.update_node(node_id, replace)).roles

    async def _join_consensus(
        self, record: state_pb2.NodeRecord
    ) -> common_pb2.NodeRoles.ConsensusMember:
        if not record.status.external_address:
            raise _refuse(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"node {record.id} has reported no address yet; its etcd member needs one",
            )
        address = ipaddress.ip_address(record.status.external_address)
        url = peer_url(str(address), self.peer_port)
        members = await self.leader.client.members()
        if not any(url in member.peer_urls for member in members):
            added = await self.leader.membership.add_learner(url)
            members = [*members, added]
        certificate = self.leader.authority.member_certificate(
            public_key_from_der(record.public_key), record.id, [address]
        )
        role = common_pb2.NodeRoles.ConsensusMember(
            ca_certificate=self.leader.authority.consensus_ca_pem,
            peer_certificate=certificate_to_pem(certificate),
        )
        for member in members:
            name = member.name or (record.id if url in member.peer_urls else "")
            if name and member.peer_urls:
                role.peers.add(name=name, url=member.peer_urls[0])
        return role

    async def _leave_consensus(self, record: state_pb2.NodeRecord) -> None:
        if record.roles.HasField("kubernetes_controller"):
            raise _refuse(
                grpc.StatusCode.FAILED_PRECONDITION,
                "unset kubernetes_controller first: it needs consensus_member",
            )
        member = _member_of(await self.leader.client.members(), record)
        if member is not None:
            await self.leader.membership.remove(member.id)


def _member_of(members: Sequence[Member], record: state_pb2.NodeRecord) -> Member | None:
    """The etcd member of a node: by name, or (not started yet) by peer URL."""
    for member in members:
        if member.name == record.id:
            return member
    urls = {peer.url for peer in record.roles.consensus_member.peers if peer.name == record.id}
    return next((m for m in members if urls & set(m.peer_urls)), None)
