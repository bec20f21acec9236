"""Whether the consensus has a quorum, and if not, which members answer.

A curator whose etcd has no quorum (fewer than a majority of the voting members run) can
neither lead nor name a leader, and every read it makes waits out its timeout. Without
this, an operator saw ``ctl`` search for a leader for 10 s and then say "no curator named
a leader", with nothing about why. The local member knows at once: it has no raft leader.
Then the curator asks every voting member, in parallel and briefly, whether it answers::

    local member's status ── has a leader ──▶ None (quorum; nothing to say)
        │ no leader (or no answer: the local member itself is down)
        ▼
    member list, serializable (the local member's own view: it needs no quorum)
        ▼
    status of each voter at its client URL, within PROBE_TIMEOUT ──▶ QuorumReport
        fewer than a majority answer: the report; else None (an election in progress)

The curator gives the report to clients in ``GetCurrentLeaderResponse.no_quorum`` and
shows it in its runnable's note and log (``curator``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

from roleserve_controlplane.consensus import EtcdClient, EtcdRequestError, Member
from roleserve_core import curator_pb2
from roleserve_core.identity import Credentials

__all__ = ["PROBE_TIMEOUT", "MemberReach", "QuorumProbe", "QuorumReport", "probe_quorum"]

PROBE_TIMEOUT = 1.0
"""Seconds a member has to answer a status request before it counts as not answering."""


@dataclass(frozen=True, slots=True)
class MemberReach:
    """One voting member, and whether it answered."""

    name: str
    """Its node's ID."""
    address: str
    """The host of its peer URL."""
    answers: bool


@dataclass(frozen=True, slots=True)
class QuorumReport:
    """The voting members of a consensus without a quorum."""

    members: tuple[MemberReach, ...]

    @property
    def answering(self) -> list[MemberReach]:
        return [member for member in self.members if member.answers]

    @property
    def silent(self) -> list[MemberReach]:
        return [member for member in self.members if not member.answers]

    def summary(self) -> str:
        """``no quorum (1 of 3 members answer)``: for the runnable's note."""
        return f"no quorum ({len(self.answering)} of {len(self.members)} members answer)"

    def describe(self) -> str:
        """The summary with every member named, for the log."""
        silent = ", ".join(f"{m.name} {m.address}" for m in self.silent)
        answering = ", ".join(m.name for m in self.answering) or "none"
        return f"{self.summary()}: answering {answering}; not answering {silent}"

    def to_proto(self) -> curator_pb2.NoQuorum:
        return curator_pb2.NoQuorum(
            members=[
                curator_pb2.NoQuorum.Member(node_id=m.name, address=m.address, answers=m.answers)
                for m in self.members
            ]
        )


QuorumProbe = Callable[[], Awaitable["QuorumReport | None"]]
"""``probe_quorum`` bound to a curator's client and credentials."""


async def probe_quorum(
    local: EtcdClient, credentials: Credentials, *, patience: float = PROBE_TIMEOUT
) -> QuorumReport | None:
    """A report if the consensus ``local`` (a client of the local member alone) belongs to
    has no quorum; None if it has one, or if the local member cannot tell (see above).

    :param patience: seconds each request may take (the probes run in parallel).
    """
    timeout = patience
    try:
        status = await local.status(timeout=timeout)
    except EtcdRequestError:
        return None  # the local member itself is down: its runnable says so
    if status.leader or status.is_learner:
        return None
    try:
        members = await local.members(timeout=timeout, serializable=True)
    except EtcdRequestError:
        return None
    voters = [member for member in members if not member.is_learner and member.name]
    reach = [False] * len(voters)

    async def ask(index: int, member: Member) -> None:
        reach[index] = await _answers(member, credentials, timeout)

    async with anyio.create_task_group() as tasks:
        for index, member in enumerate(voters):
            tasks.start_soon(ask, index, member)
    report = QuorumReport(
        tuple(
            MemberReach(member.name, _host(member.peer_urls), answers)
            for member, answers in zip(voters, reach, strict=True)
        )
    )
    return report if len(report.answering) <= len(voters) // 2 else None


async def _answers(member: Member, credentials: Credentials, patience: float) -> bool:
    """Whether ``member`` answers a status request at its client URL within ``patience``."""
    timeout = patience
    if not member.client_urls:
        return False
    endpoint = member.client_urls[0].removeprefix("https://")
    with contextlib.suppress(EtcdRequestError):
        async with EtcdClient([endpoint], credentials, timeout=timeout, attempts=1) as client:
            await client.status(timeout=timeout)
            return True
    return False


def _host(urls: Sequence[str]) -> str:
    return (urlsplit(urls[0]).hostname or "") if urls else ""
