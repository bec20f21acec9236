"""Keeping etcd's raft leader off the leading curator's node.

The leader's election lease, left behind by a crash of its node, runs out at most a TTL
after its last renewal, and a follower is elected then. Unless that node's etcd member led
raft too: the other members first elect a raft leader (an election timeout, a second or
more on a loaded machine), and a new raft leader extends every lease by its TTL (etcd's
lessor, so that no lease expires for an election its holder could not renew through). The
successor is then elected a TTL *after the raft election*: 12.7 and 13.2 s after a SIGKILL
against a 10 s TTL (8 nodes, ``benchmarks/failover.py``), where crashes of a curator leader
that did not lead raft took 9.4 to 11 s. The two elections stack.

So a curator that wins the election hands its member's raft leadership to another voting
member that answers (etcd's MoveLeader), once, in the background, best effort: a failure
is logged at INFO and the term goes on (the cost is the slower failover above, nothing
else). Raft may elect this member again later (a raft election of its own); the next term
hands it off again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from roleserve_controlplane.consensus import EtcdClient, EtcdRequestError, Member
from roleserve_core.identity import Credentials

__all__ = ["hand_off_raft_leadership"]

log = logging.getLogger("roleserve.curator")

TIMEOUT = 2.0
"""Seconds each etcd request of the hand-off may take."""


async def hand_off_raft_leadership(local: str, credentials: Credentials) -> int | None:
    """If the member at ``local`` (``host:port``) leads raft, hand the leadership to
    another voting member that answers; the member ID it went to, or None (this member
    does not lead raft, no other voter answers, or etcd refused: logged)."""
    try:
        async with EtcdClient([local], credentials, timeout=TIMEOUT, attempts=1) as client:
            status = await client.status()
            if status.leader != status.member_id:
                return None
            members = await client.members()
            voters = [m for m in members if not m.is_learner and m.id != status.member_id]
            target = await _first_answering(voters, credentials)
            if target is None:
                return None
            await client.move_leader(target.id)
    except EtcdRequestError as exc:
        log.info("etcd's raft leadership stays with this curator's member: %s", exc)
        return None
    log.info("handed etcd's raft leadership to member %s", target.name or f"{target.id:x}")
    return target.id


async def _first_answering(voters: Sequence[Member], credentials: Credentials) -> Member | None:
    """The first of ``voters`` whose member answers a status request itself."""
    for member in voters:
        if not member.client_urls:
            continue
        endpoint = member.client_urls[0].removeprefix("https://")
        try:
            async with EtcdClient([endpoint], credentials, timeout=TIMEOUT, attempts=1) as client:
                await client.status()
        except EtcdRequestError:
            continue
        return member
    return None
