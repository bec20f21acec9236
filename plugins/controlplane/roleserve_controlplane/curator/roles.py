"""Assigning and removing roles, with what the consensus role takes beyond a record write.

::

    set consensus_member     node must be UP with an address
                             → member certificate for the node's key (consensus CA)
                             → etcd learner at https://<address>:7837 (reused if present)
                             → role filled: consensus CA, the certificate, every member
    unset consensus_member   refused if kubernetes_controller stays (unset both at once)
                             → etcd member removed first (refused if quorum would go)
                             → record written through the members that remain
    kubernetes_controller    needs consensus_member (in the roles after the change)
    custom:<name>            any valid name, with string parameters

All changes of one request are checked before anything happens, so a request with one bad
change changes nothing. The limits (changes per request, custom roles per node, parameters
per role and their lengths) are ``roleserve_core.limits``'.

Leaving consensus is two steps no transaction spans: the etcd member goes, then the record.
The record is written through the members that remain, since the leader's own client
reaches only its local member, which is the one removed when the node leaving is the
leader's. If that write still fails, the answer says the change is half done (the member
gone, the role still recorded) and that the same request completes it: a node without an
etcd member is skipped straight to the write.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

import grpc

from roleserve_controlplane.consensus import (
    DEFAULT_PEER_PORT,
    EtcdClient,
    EtcdRequestError,
    LeadershipLostError,
    Member,
)
from roleserve_controlplane.consensus.faults import fault_point
from roleserve_controlplane.consensus.membership import endpoint_of
from roleserve_controlplane.curator.errors import RefusedError
from roleserve_controlplane.curator.leader import LeaderState, peer_url
from roleserve_controlplane.curator.state import ClusterState
from roleserve_controlplane.curator.validation import shown
from roleserve_controlplane.proto import state_pb2
from roleserve_core import CUSTOM_ROLE_NAME, common_pb2, management_pb2
from roleserve_core.identity import certificate_to_pem, public_key_from_der
from roleserve_core.limits import (
    MAX_CUSTOM_ROLES,
    MAX_ROLE_CHANGES,
    MAX_ROLE_LENGTH,
    MAX_ROLE_PARAMETER_KEY_LENGTH,
    MAX_ROLE_PARAMETER_VALUE_LENGTH,
    MAX_ROLE_PARAMETERS,
    check_count,
    check_text,
)

__all__ = ["BUILTIN_ROLES", "RoleChanges", "check_changes", "check_role", "has_role", "member_of"]

BUILTIN_ROLES = ("consensus_member", "kubernetes_controller", "kubernetes_worker")

Change = management_pb2.UpdateNodeRolesRequest.Change


def _refuse(code: grpc.StatusCode, message: str) -> RefusedError:
    return RefusedError(code, message)


def has_role(roles: common_pb2.NodeRoles, role: str) -> bool:
    """Whether ``roles`` hold ``role`` (a built-in name or ``custom:<name>``)."""
    if role.startswith("custom:"):
        return role.removeprefix("custom:") in roles.custom
    return roles.HasField(role)  # type: ignore[arg-type]


def check_role(role: str) -> None:
    """Refuse (INVALID_ARGUMENT) a role that is neither built in nor ``custom:<name>``."""
    check_text("role", role, MAX_ROLE_LENGTH)
    if role.startswith("custom:"):
        if not CUSTOM_ROLE_NAME.fullmatch(role.removeprefix("custom:")):
            raise _refuse(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"invalid custom role {shown(role)}: lower case letters, digits and '_.-', "
                "at most 63 characters",
            )
    elif role not in BUILTIN_ROLES:
        raise _refuse(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"unknown role {shown(role)}; built-in roles are {', '.join(BUILTIN_ROLES)}, "
            "third-party roles are written custom:<name>",
        )


def check_changes(changes: Sequence[Change]) -> None:
    """Refuse (INVALID_ARGUMENT) changes beyond the limits, or naming an unknown role."""
    check_count("changes", changes, MAX_ROLE_CHANGES)
    for change in changes:
        check_role(change.role)
        field = f"parameters of {change.role}"
        check_count(field, change.parameters, MAX_ROLE_PARAMETERS)
        for key, value in change.parameters.items():
            if not key:
                raise _refuse(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: a key is empty")
            check_text(f"{field}: key", key, MAX_ROLE_PARAMETER_KEY_LENGTH)
            check_text(f"{field}: value of {shown(key)}", value, MAX_ROLE_PARAMETER_VALUE_LENGTH)


def _changed(
    roles: common_pb2.NodeRoles, changes: Sequence[Change], consensus: bool
) -> common_pb2.NodeRoles:
    """``roles`` after every change but of consensus_member, which is kept only if
    ``consensus`` (the caller fills it in when it is new)."""
    target = common_pb2.NodeRoles()
    target.CopyFrom(roles)
    for change in changes:
        if change.role != "consensus_member":
            _apply(target, change)
    if not consensus:
        target.ClearField("consensus_member")
    if len(target.custom) > len(roles.custom) and len(target.custom) > MAX_CUSTOM_ROLES:
        raise _refuse(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the node would hold {len(target.custom)} custom roles; at most "
            f"{MAX_CUSTOM_ROLES} are allowed",
        )
    if target.HasField("kubernetes_controller") and not consensus:
        raise _refuse(
            grpc.StatusCode.FAILED_PRECONDITION,
            "kubernetes_controller needs consensus_member; keep or assign both",
        )
    return target


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
        check_changes(changes)
        # The record from etcd, not from the node cache, which may not show the last
        # change yet (the node's address, its state, or roles a request just set).
        stored = await self.leader.state.node(node_id)
        if stored is None:
            raise _refuse(grpc.StatusCode.NOT_FOUND, f"no node {node_id}")
        record = stored.record
        if record.state != common_pb2.NODE_STATE_UP:
            state = common_pb2.NodeState.Name(record.state)
            raise _refuse(grpc.StatusCode.FAILED_PRECONDITION, f"node {node_id} is {state}, not UP")
        consensus = [change for change in changes if change.role == "consensus_member"]
        had_consensus = record.roles.HasField("consensus_member")
        wants_consensus = consensus[-1].assign if consensus else had_consensus
        _changed(record.roles, changes, wants_consensus)  # refuses before etcd changes
        joined: common_pb2.NodeRoles.ConsensusMember | None = None
        remaining: list[Member] | None = None
        if wants_consensus and not had_consensus:
            joined = await self._join_consensus(record)
        elif had_consensus and not wants_consensus:
            remaining = await self._leave_consensus(record)

        def replace(current: state_pb2.NodeRecord) -> None:
            # Applied to the record as it is at the write, not as read above: a concurrent
            # change of another role survives (update_node retries when it lost a race).
            roles = _changed(current.roles, changes, wants_consensus)
            if joined is not None:
                roles.consensus_member.CopyFrom(joined)
            current.roles.CopyFrom(roles)

        if remaining is None:
            # Unless the consensus changed meanwhile, the record read above is changed at
            # the first try (it is still the stored one unless another change came between).
            read = stored if joined is None else None
            return (await self.leader.state.update_node(node_id, replace, read=read)).roles
        return await self._write_after_leaving(node_id, replace, remaining)

    async def _write_after_leaving(
        self,
        node_id: str,
        replace: Callable[[state_pb2.NodeRecord], None],
        remaining: Sequence[Member],
    ) -> common_pb2.NodeRoles:
        """The record write once the node's etcd member is gone: through the members that
        remain (see the module docstring).

        :raises RefusedError: UNAVAILABLE, saying the change is half done, if the write
            failed.
        """
        endpoints = [endpoint_of(url) for member in remaining for url in member.client_urls]
        try:
            async with EtcdClient(endpoints, self.leader.etcd_credentials) as client:
                state = ClusterState(client, self.leader.leadership)
                return (await state.update_node(node_id, replace)).roles
        except (EtcdRequestError, LeadershipLostError) as exc:
            raise _refuse(
                grpc.StatusCode.UNAVAILABLE,
                f"half done: the etcd member of {node_id} was removed, but its record still "
                f"holds consensus_member ({exc}); run the same change again to complete it",
            ) from exc

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
            fault_point("join:after-member-add")  # a retried request finds the learner
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

    async def _leave_consensus(self, record: state_pb2.NodeRecord) -> list[Member] | None:
        """Remove the node's etcd member; the members that remain, or None if it had none
        (a change half done before, see the module docstring)."""
        # The roles after the request were checked before: kubernetes_controller goes too.
        members = await self.leader.client.members()
        member = member_of(members, record)
        if member is None:
            return None
        await self.leader.membership.remove(member.id)
        return [other for other in members if other.id != member.id]


def member_of(members: Sequence[Member], record: state_pb2.NodeRecord) -> Member | None:
    """The etcd member of a node: by name, or (not started yet) by peer URL."""
    for member in members:
        if member.name == record.id:
            return member
    urls = {peer.url for peer in record.roles.consensus_member.peers if peer.name == record.id}
    return next((m for m in members if urls & set(m.peer_urls)), None)
