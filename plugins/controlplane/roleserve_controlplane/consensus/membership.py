"""Changing who is in the etcd cluster: add as learner, promote, remove, list.

::

    add_learner(peer URL) ──▶ learner (non-voting) ──promote() once caught up──▶ voter
    remove(member) ── refused (QuorumError) if the voters left could not form a quorum

New members always join as learners: a learner receives the log without voting, so a slow
or broken newcomer cannot stall the cluster, and it is promoted only once it has caught up
(etcd itself refuses an early promotion; ``promote`` retries until a deadline).

Removal checks quorum against what is reachable now, not against the member list: removing
a healthy voter while another is down can leave a cluster that cannot commit anything, and
a membership change itself needs a quorum to commit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio

from roleserve_controlplane.consensus.client import ETCD_RETRY, EtcdClient, Member, MemberStatus
from roleserve_controlplane.consensus.errors import (
    EtcdRequestError,
    MembershipError,
    NotCaughtUpError,
    QuorumError,
)
from roleserve_core import retry
from roleserve_core.identity import Credentials

__all__ = ["MemberHealth", "Membership", "endpoint_of"]

T = TypeVar("T")

log = logging.getLogger("roleserve.consensus")

STATUS_TIMEOUT = 2.0
"""Seconds a member may take to answer a status request before it counts as unreachable."""


def endpoint_of(url: str) -> str:
    """``host:port`` of a client URL such as ``https://127.0.0.11:7836``."""
    return url.split("://", 1)[-1].rstrip("/")


@dataclass(frozen=True, slots=True)
class MemberHealth:
    """A member and what it answered, if anything."""

    member: Member
    status: MemberStatus | None
    """None if it did not answer within ``STATUS_TIMEOUT``."""

    @property
    def healthy(self) -> bool:
        """It answered, knows a leader, and reports no errors."""
        return self.status is not None and self.status.leader != 0 and not self.status.errors


class Membership:
    """Membership operations on the cluster ``client`` talks to.

    :param credentials: used to ask each member for its own status.
    """

    def __init__(self, client: EtcdClient, credentials: Credentials) -> None:
        self.client = client
        self.credentials = credentials

    async def health(self, member: Member) -> MemberHealth:
        """Ask ``member`` itself for its status."""
        if not member.client_urls:
            return MemberHealth(member, None)  # added, never started
        endpoints = [endpoint_of(url) for url in member.client_urls]
        try:
            async with EtcdClient(endpoints, self.credentials, attempts=1) as direct:
                status = await direct.status(timeout=STATUS_TIMEOUT)
        except EtcdRequestError:
            status = None
        return MemberHealth(member, status)

    async def list(self) -> list[MemberHealth]:
        """Every member with its health, asked in parallel."""
        members = await self.client.members()
        results: list[MemberHealth | None] = [None] * len(members)

        async def ask(index: int, member: Member) -> None:
            results[index] = await self.health(member)

        async with anyio.create_task_group() as tasks:
            for index, member in enumerate(members):
                tasks.start_soon(ask, index, member)
        return [result for result in results if result is not None]

    async def add_learner(self, peer_url: str, *, patience: float = 30.0) -> Member:
        """Add a learner that will start at ``peer_url``; returns it (with its ID).

        :param patience: seconds to keep trying while etcd refuses the change because its
            leader has not been connected to every peer for long enough (etcd's "unhealthy
            cluster", for a few seconds after each membership change), because a member
            at ``peer_url`` was removed within the same second (``_READDED``), or does not
            answer in time (``_NO_ANSWER``: then the learner may have been added all the
            same, and is looked for before asking again).
        :raises MembershipError: if the cluster stays unhealthy that long.
        """

        async def add() -> Member:
            try:
                return await self.client.add_learner(peer_url)
            except EtcdRequestError as exc:
                if not any(reason in str(exc) for reason in _NO_ANSWER):
                    raise
                added = await self._learner_at(peer_url)
                if added is None:
                    raise
                return added

        member = await _retrying(
            add,
            patience,
            _UNHEALTHY + _READDED + _NO_ANSWER,
            f"cannot add a learner at {peer_url}: the cluster stayed unhealthy for {patience}s",
        )
        log.info("added learner %x at %s", member.id, peer_url)
        return member

    async def _learner_at(self, peer_url: str) -> Member | None:
        """The learner that waits at ``peer_url``, if etcd lists one."""
        for member in await self.client.members():
            if member.is_learner and peer_url in member.peer_urls:
                return member
        return None

    async def promote(self, member_id: int, *, patience: float = 30.0) -> None:
        """Promote the learner ``member_id`` once it has caught up.

        :param patience: seconds to keep trying while etcd says it has not caught up.
        :raises NotCaughtUpError: if it has not caught up within ``patience`` seconds.
        """
        try:
            await _retrying(
                lambda: self.client.promote(member_id),
                patience,
                _NOT_CAUGHT_UP + _UNHEALTHY,
                f"learner {member_id:x} did not catch up with the leader within {patience}s",
            )
        except MembershipError as exc:
            raise NotCaughtUpError(str(exc)) from None
        log.info("promoted member %x", member_id)

    async def remove(self, member_id: int, *, patience: float = 30.0) -> None:
        """Remove ``member_id``, unless the voters left could not form a quorum.

        :param patience: as for ``add_learner``.

        :raises QuorumError: if the cluster has no quorum now, or would have none after.
        :raises MembershipError: if there is no such member.
        """
        try:
            members = await self.list()
        except EtcdRequestError as exc:
            raise QuorumError(
                f"cannot remove member {member_id:x}: the cluster does not answer for its "
                f"members ({exc}); it may have lost its quorum"
            ) from exc
        target = next((m for m in members if m.member.id == member_id), None)
        if target is None:
            raise MembershipError(f"no etcd member {member_id:x}")
        if not target.member.is_learner:
            _check_quorum(target, [m for m in members if not m.member.is_learner])
        await _retrying(
            lambda: self.client.remove(member_id),
            patience,
            _UNHEALTHY,
            f"cannot remove {_describe(target.member)}: the cluster stayed unhealthy for "
            f"{patience}s",
        )
        log.info("removed member %x (%s)", member_id, target.member.name or "never started")


_UNHEALTHY = ("unhealthy cluster",)
"""etcd refuses membership changes until its leader has been connected to all peers for a
while (5 s in etcd 3.4 and 3.5): after every change, the next one must wait."""
_NOT_CAUGHT_UP = ("in sync", "not ready")
_NO_ANSWER = ("no answer within",)
"""etcd 3.5.1 sometimes answers a MemberAdd right after a MemberRemove only after seconds
(seen: more than the client's 5 s), having added the member meanwhile or not."""
_READDED = ("member not found",)
"""etcd derives a new member's ID from its peer URLs and the time in seconds: a learner
re-added at the URL of one removed within the same second gets the removed ID, and etcd
3.4 answers "member not found" (seen when a node replaces its interrupted join's learner)."""


async def _retrying(
    change: Callable[[], Awaitable[T]], patience: float, transient: Sequence[str], failure: str
) -> T:
    """Run ``change`` until it succeeds, retrying while etcd's error is ``transient``."""
    with anyio.move_on_after(patience):
        return await retry(
            change,
            retry_on=EtcdRequestError,
            when=lambda exc: any(reason in str(exc) for reason in transient),
            backoff=ETCD_RETRY,
        )
    raise MembershipError(failure)


def _describe(member: Member) -> str:
    return f"{member.name or 'unnamed'} ({member.id:x})"


def _check_quorum(target: MemberHealth, voters: Sequence[MemberHealth]) -> None:
    healthy_now = sum(voter.healthy for voter in voters)
    if healthy_now < len(voters) // 2 + 1:
        raise QuorumError(
            f"cannot remove {_describe(target.member)}: the cluster has lost its quorum "
            f"({healthy_now} of {len(voters)} voting members reachable), so no membership "
            "change can commit"
        )
    remaining = [voter for voter in voters if voter is not target]
    if not remaining:
        raise QuorumError(f"cannot remove {_describe(target.member)}: it is the last voter")
    healthy_after = sum(voter.healthy for voter in remaining)
    needed = len(remaining) // 2 + 1
    if healthy_after < needed:
        raise QuorumError(
            f"cannot remove {_describe(target.member)}: {healthy_after} of the "
            f"{len(remaining)} voting members left are reachable, and a quorum needs {needed}"
        )
