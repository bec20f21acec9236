"""``Management.RebuildConsensusMember``: a member whose etcd data is corrupt made anew.

::

    node NODE, not the leader's own, holding consensus_member
    ├── its member a voter or a started learner ──▶ removed (refused, FAILED_PRECONDITION, if
    │                                               the voters left could not form a quorum)
    │                                               ──▶ a learner added at its peer URL
    ├── its member already removed, no learner ──▶ a learner added (a rebuild interrupted
    │                                              between the two steps, asked again)
    └── a learner that never started waits at its peer URL ──▶ nothing to do (asked twice)

    then, on the node: its member finds the learner at its next start (``consensus.record``),
    moves its data aside (``data.removed-<time>``), joins as the learner and catches up from
    the others; the leader promotes it (``Curator._promote_learners``)

The mechanism, decided: the cluster's member list itself marks the rebuild (the member gone,
a learner that never started at its peer URL), the state the leader already leaves when it
gives a node the consensus_member role. Nothing else is written, so nothing can disagree
with etcd, and a node that was down meanwhile finds the rebuild when it starts. The node's
roles do not change: its member joins with the cluster's current members, as an interrupted
join does.

Refused:

- for a node without the consensus_member role, or unknown (NOT_FOUND);
- when removing its member would leave the voters unable to form a quorum (the checks of
  ``Membership.remove``: counted against the members that answer now);
- for the leader's own node: the leader reaches etcd through its own member, so it would
  lose etcd between the removal and the addition. That member is healthy anyway (it serves
  the leader); stopping its node moves the lead elsewhere, and the request can then be made.
"""

from __future__ import annotations

import grpc

from roleserve_controlplane.consensus import DEFAULT_PEER_PORT, MembershipError, QuorumError
from roleserve_controlplane.curator.errors import RefusedError
from roleserve_controlplane.curator.leader import LeaderState, peer_url
from roleserve_controlplane.curator.roles import member_of
from roleserve_controlplane.proto import state_pb2

__all__ = ["rebuild_member"]


async def rebuild_member(
    leader: LeaderState, node_id: str, peer_port: int = DEFAULT_PEER_PORT
) -> str:
    """Replace ``node_id``'s etcd member by a learner at its peer URL (see the module
    docstring); returns what was done, in words."""
    stored = await leader.state.node(node_id)
    if stored is None:
        raise RefusedError(grpc.StatusCode.NOT_FOUND, f"no node {node_id}")
    record = stored.record
    if not record.roles.HasField("consensus_member"):
        raise RefusedError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"node {node_id} is not a consensus member: it has no etcd data to rebuild",
        )
    url = _peer_url(record, peer_port)
    if url is None:
        raise RefusedError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"node {node_id} has reported no address: its etcd member's peer URL is unknown",
        )
    members = await leader.client.members()
    member = member_of(members, record) or next((m for m in members if url in m.peer_urls), None)
    if member is not None and member.is_learner and not member.name:
        return f"learner {member.id:x} already waits for node {node_id} to join"
    if node_id == leader.node_id:
        raise RefusedError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"node {node_id}'s curator leads the cluster through its etcd member, which so "
            "serves; stop that node (another curator takes the lead) and ask again",
        )
    membership = leader.membership
    try:
        if member is not None:
            await membership.remove(member.id)
        learner = await membership.add_learner(url)
    except QuorumError as exc:
        raise RefusedError(
            grpc.StatusCode.FAILED_PRECONDITION, f"not rebuilding node {node_id}: {exc}"
        ) from None
    except MembershipError as exc:
        raise RefusedError(
            grpc.StatusCode.UNAVAILABLE, f"rebuilding node {node_id}: {exc}; ask again"
        ) from None
    removed = f"removed member {member.id:x}, " if member is not None else ""
    return (
        f"{removed}added learner {learner.id:x} at {url}: node {node_id} moves its etcd data "
        "aside at its member's next start and joins as it"
    )


def _peer_url(record: state_pb2.NodeRecord, peer_port: int) -> str | None:
    """The node's peer URL: as its role names it, else from its address."""
    for peer in record.roles.consensus_member.peers:
        if peer.name == record.id:
            return str(peer.url)
    address = record.status.external_address
    return peer_url(address, peer_port) if address else None
