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
member that answers (etcd's MoveLeader), in the background, best effort: a failure is
logged at INFO and the term goes on (the cost is the slower failover above, nothing else).
It looks again (``RaftLeaderKeeper``) whenever it promoted a learner and every
``RECHECK_EVERY`` seconds: the curator that bootstrapped a cluster is its only voter when
its term begins, so there was nobody to hand to, and ``cluster up``'s node 1 kept raft's
leadership for good (a SIGKILL of it at 100 local nodes: the new leader served 14.6 s
after, against 10 s for a lease alone); and raft may elect this member again later (an
election of its own, when the raft leader's member restarts).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from roleserve_controlplane.consensus import EtcdClient, EtcdRequestError, Member
from roleserve_core.identity import Credentials

__all__ = ["RECHECK_EVERY", "RaftLeaderKeeper", "hand_off_raft_leadership"]

log = logging.getLogger("roleserve.curator")

TIMEOUT = 2.0
"""Seconds each etcd request of the hand-off may take."""
RECHECK_EVERY = 30.0
"""Seconds between looks at who leads raft while nothing changed the voters: one status
request to the local member (when it does not lead, nothing else)."""


class RaftLeaderKeeper:
    """For a leading curator's term: hand raft's leadership away now, after each change
    of the voters (``voters_changed``), and every ``every`` seconds (see the module
    docstring)."""

    def __init__(self, local: str, credentials: Credentials, every: float = RECHECK_EVERY):
        self.local = local
        self.credentials = credentials
        self.every = every
        self._again = anyio.Event()

    def voters_changed(self) -> None:
        """A learner became a voter: one to hand the leadership to, maybe the first."""
        self._again.set()

    async def run(self) -> None:
        """Until cancelled (the term's end)."""
        while True:
            await hand_off_raft_leadership(self.local, self.credentials)
            with anyio.move_on_after(self.every):
                await self._again.wait()
            self._again = anyio.Event()


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
