"""The membership record, and how a member decides how to start etcd.

A member's bootstrap or join has committed once its etcd serves as that member; only then
is ``membership.json`` written (atomically) next to the data: the cluster ID, the member
ID, the name, how it got there. That record, never the mere presence of data, makes the
next start a restart. etcd data without the record is what an interrupted bootstrap or join
leaves (a crash, SIGKILL, ENOSPC while etcd creates its WAL); started on it with
``--initial-cluster-state=new``, etcd once founded a second cluster of one member.

::

    plan_start(config)
    ├── record ──▶ RESTART (etcd: "existing", never "new")
    │     ├── a peer answers: the member is gone from its list, and a learner that never
    │     │   started waits at this member's peer URL ──▶ a rebuild, or the role given
    │     │   again (below): the data moved aside, the record removed; JOIN as that learner
    │     ├── no WAL under data/ ──▶ CorruptDataError (retried until the operator has it
    │     │                        rebuilt: ``ctl consensus rebuild NODE``)
    │     └── a peer answers, and its cluster is another or lacks the member
    │                            ──▶ NotAMemberError (final): starting would fork or fail
    ├── no record, no data ──▶ BOOTSTRAP (no peers) or JOIN (peers)
    └── no record, data (interrupted)
          ├── no peers (bootstrapping) ──▶ data moved aside, BOOTSTRAP again (nobody can
          │                                 have joined a cluster before it served)
          ├── this node is its only peer ──▶ RESTART, recorded once it serves (a member
          │                                 whose data predates records; "existing" cannot
          │                                 found a cluster)
          └── ask the other peers:
                none answers ──▶ with a WAL: RESTART, recorded once it serves (a voter
                                 the cluster needs for its quorum: then none can answer);
                                 without: PeersUnreachableError (retried after the backoff)
                a voter of this name ──▶ the join committed (promoted before the record
                                         was written): record adopted, RESTART; moving
                                         a voter's data aside could cost the quorum
                a learner, or none ──▶ the learner removed and added again (a fresh ID:
                              the leader may hold progress of the old one, and etcd panics
                              when a member's log is behind its commit), then the data
                              moved aside; JOIN with the cluster's current members

Moved aside means renamed to ``data.interrupted-<UTC time>`` (``data.removed-<UTC time>``
for a member the cluster removed) with one WARNING line naming it: never deleted. Peers are
asked on their client port, the same as this member's (as on every roleserve node), with
the member's own certificate.

A rebuild (``ctl consensus rebuild NODE``, the leader's ``curator.rebuild``) replaces a
member whose data is corrupt. Decided so, the simplest mechanism that survives a crash at
any step: the leader removes the member and adds a learner at the same peer URL, exactly
as it adds one for a node given the consensus_member role; the node's member sees that at
its next start (a corrupt member restarts after the supervisor's backoff, ``corruption``)
and joins as that learner, which the leader promotes once it has caught up. The cluster's
member list is the mark: no key to keep in step with it, nothing for the node to watch, and
a node that was down meanwhile finds it too. A member whose role was taken away and given
again looks the same to it (the leader removed the member, then added a learner at its
peer URL), and is joined anew the same way: this is the one place a member's data leaves
``data/``, once the cluster has confirmed the removal (the ``controlplane`` worker, without
the role, leaves the data alone: the role may merely be unknown). A member removed without
a learner waiting (its role taken away, not given again) is still refused
(NotAMemberError), and only a learner that never started counts, so a running member is
never taken for one to rebuild. The rebuild may
also land after the start was planned, before etcd served: etcd, its log cut back by a
repair, may then know no peer, and no leader contacts a removed member, so it would wait
for one for ever. So the member asks again (``check_membership``) while etcd does not serve,
and stops it to start again (RebuildWaitingError), which rebuilds it. The record is
removed after the data is moved aside: a crash in between leaves the record without data,
and the next start, finding the learner still waiting, finishes the rebuild; a crash after
leaves data-less, record-less state, a plain join.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from roleserve_controlplane.consensus.client import EtcdClient, Member
from roleserve_controlplane.consensus.corruption import corrupt_data_error
from roleserve_controlplane.consensus.errors import (
    EtcdRequestError,
    MembershipRecordError,
    NotAMemberError,
    PeersUnreachableError,
    RebuildWaitingError,
)
from roleserve_controlplane.consensus.membership import Membership
from roleserve_controlplane.consensus.saved import MEMBERSHIP_FILE
from roleserve_core import write_atomically

if TYPE_CHECKING:
    from roleserve_controlplane.consensus.member import MemberConfig

__all__ = [
    "MEMBERSHIP_FILE",
    "MemberMode",
    "MembershipRecord",
    "Start",
    "check_membership",
    "plan_start",
]

ASK_TIMEOUT = 2.0
"""Seconds a peer may take to answer before the next one is asked."""


class MemberMode(enum.Enum):
    """How a member starts etcd: only ``BOOTSTRAP`` makes a new cluster."""

    BOOTSTRAP = "bootstrap a new one-member cluster"
    JOIN = "join an existing cluster"
    RESTART = "restart from its data directory"


@dataclass(frozen=True)
class MembershipRecord:
    """Proof that a member's bootstrap or join committed: etcd served as it."""

    name: str
    cluster_id: int
    member_id: int
    how: str
    """How it became a member: ``bootstrap``, ``join`` or ``adopted`` (data found without
    a record, confirmed by the cluster or, for a cluster's only member, by serving)."""

    def save(self, path: Path) -> None:
        """Write the record atomically (a crash leaves no half-written record)."""
        write_atomically(path, json.dumps(asdict(self), indent=2).encode() + b"\n")

    @classmethod
    def load(cls, path: Path) -> MembershipRecord | None:
        """The record at ``path``; None if there is none.

        :raises MembershipRecordError: if it is unreadable.
        """
        try:
            fields = json.loads(path.read_bytes())
            return cls(
                str(fields["name"]),
                int(fields["cluster_id"]),
                int(fields["member_id"]),
                str(fields["how"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MembershipRecordError(
                f"{path}: unreadable membership record ({exc}); restore it, or move the "
                "member directory aside to join again"
            ) from None


@dataclass(frozen=True)
class Start:
    """How to start etcd: the mode, and the initial cluster when joining."""

    mode: MemberMode
    peers: Mapping[str, str]


async def plan_start(config: MemberConfig, log: logging.Logger) -> Start:
    """Decide how ``config``'s member starts (see the module docstring)."""
    record = MembershipRecord.load(config.membership_file)
    if record is not None:
        view = await _ask_cluster(config)
        learner = _rebuild_learner(config, record, view)
        if view is not None and learner is not None:
            return _rebuild(config, log, view, learner)
        _refuse_lost_data(config)
        _refuse_unknown(config, record, view)
        return Start(MemberMode.RESTART, config.peers)
    if not (config.data_dir / "member").exists():
        return Start(config.mode(), config.peers)
    if not config.peers:
        _move_aside(config, log, "an interrupted bootstrap")
        return Start(MemberMode.BOOTSTRAP, config.peers)
    if not _other_endpoints(config):
        log.info("no membership record: this node is its cluster's only member; restarting")
        return Start(MemberMode.RESTART, config.peers)
    return await _finish_interrupted_join(config, log)


async def check_membership(config: MemberConfig) -> None:
    """Ask the cluster again, while this recorded member's etcd does not serve, whether it
    still lists the member (see the module docstring).

    :raises RebuildWaitingError: if it was removed and a learner waits for it (the next
        start rebuilds it).
    :raises NotAMemberError: if it was removed, or the cluster is another.
    """
    record = MembershipRecord.load(config.membership_file)
    if record is None:
        return
    view = await _ask_cluster(config)
    learner = _rebuild_learner(config, record, view)
    if view is not None and learner is not None:
        raise RebuildWaitingError(
            f"node {config.name}: the cluster (asked {view.endpoint}) removed etcd member "
            f"{record.member_id:x} while it started, and waits for it as learner "
            f"{learner.id:x}: starting again, to rebuild it"
        )
    _refuse_unknown(config, record, view)


def _has_wal(config: MemberConfig) -> bool:
    """Whether etcd's data has a WAL (etcd creates it as ``wal.tmp`` and renames it only
    once complete, so ENOSPC while creating it leaves none)."""
    wal = config.data_dir / "member" / "wal"
    return wal.is_dir() and any(wal.glob("*.wal"))


def _refuse_lost_data(config: MemberConfig) -> None:
    """Refuse to start etcd without the WAL of a recorded member: started, etcd would found
    a new cluster, or join without its log. The same one line as corrupt data, retried
    after the backoff, so that the member finds the rebuild the operator asks for."""
    if not _has_wal(config):
        raise corrupt_data_error(
            config.data_dir,
            config.name,
            f"its write-ahead log is gone, though {config.membership_file.name} says this "
            "node is a member",
        )


def _rebuild_learner(
    config: MemberConfig, record: MembershipRecord, view: _ClusterView | None
) -> Member | None:
    """The learner the leader added to rebuild this member (see the module docstring), if
    the cluster that answered lists one: at this member's peer URL, never started, in the
    recorded cluster, which no longer lists the recorded member."""
    if view is None or view.cluster_id != record.cluster_id:
        return None
    if any(member.id == record.member_id for member in view.members):
        return None
    return next(
        (
            member
            for member in view.members
            if config.peer_url in member.peer_urls and member.is_learner and not member.name
        ),
        None,
    )


def _rebuild(
    config: MemberConfig, log: logging.Logger, view: _ClusterView, learner: Member
) -> Start:
    """Move the data aside, then the record; join as ``learner``."""
    log.warning(
        "the cluster (asked %s) removed this member and waits for it as learner %x (a "
        "rebuild, or the consensus_member role given again): joining it anew from the "
        "other members",
        view.endpoint,
        learner.id,
    )
    if config.data_dir.exists():
        _move_aside(config, log, "a removed member", suffix="removed")
    config.membership_file.unlink(missing_ok=True)
    return Start(MemberMode.JOIN, _initial_cluster(config, view.members))


def _refuse_unknown(
    config: MemberConfig, record: MembershipRecord, view: _ClusterView | None
) -> None:
    """Refuse to start a member the cluster, asked, does not know; if no peer answers (the
    whole cluster starting, or a one-member cluster), etcd's own data decides."""
    if view is None:
        return
    if view.cluster_id != record.cluster_id:
        raise NotAMemberError(
            f"node {config.name}: its peer at {view.endpoint} belongs to etcd cluster "
            f"{view.cluster_id:x}, but {config.membership_file} says this member joined "
            f"cluster {record.cluster_id:x}; etcd was not started: move {config.directory} "
            "aside and give the node its consensus_member role again"
        )
    if not any(member.id == record.member_id for member in view.members):
        raise NotAMemberError(
            f"node {config.name}: its etcd member {record.member_id:x} is not in the member "
            f"list of its cluster (asked {view.endpoint}): it was removed; etcd was not "
            "started: remove the node's consensus_member role and give it again to rejoin"
        )


async def _finish_interrupted_join(
    config: MemberConfig,
    log: logging.Logger,
) -> Start:
    view = await _ask_cluster(config)
    if view is None and _has_wal(config):
        # Perhaps a voter the cluster needs for its quorum (then no peer can answer the
        # member list): restart it; "existing" cannot found a cluster.
        log.info("no membership record and no peer answers, but etcd has its WAL: restarting")
        return Start(MemberMode.RESTART, config.peers)
    if view is None:
        raise PeersUnreachableError(
            f"node {config.name}: its etcd join was interrupted and no peer answers "
            f"({', '.join(_other_endpoints(config))}); retrying"
        )
    mine = next((m for m in view.members if config.peer_url in m.peer_urls), None)
    if mine is not None and not mine.is_learner and mine.name == config.name:
        MembershipRecord(config.name, view.cluster_id, mine.id, "adopted").save(
            config.membership_file
        )
        log.info("the cluster lists this member as a voter: its join had committed; restarting")
        return Start(MemberMode.RESTART, config.peers)
    members = await _replace_learner(config, view.endpoint, mine)
    _move_aside(config, log, "an interrupted join")
    return Start(MemberMode.JOIN, _initial_cluster(config, members))


async def _replace_learner(config: MemberConfig, endpoint: str, old: Member | None) -> list[Member]:
    """Remove ``old`` (if the cluster still has it) and add this member again as a learner;
    the cluster's members after.

    Done before the data is moved aside, so that a crash in between leaves data without a
    record again, and the next start repeats this (``old`` then is None, or the fresh
    learner, which is replaced once more): it converges, whatever step it stopped at.
    """
    async with EtcdClient([endpoint], config.credentials) as client:
        membership = Membership(client, config.credentials)
        if old is not None:
            await membership.remove(old.id)
        await membership.add_learner(config.peer_url)
        return await client.members()


def _initial_cluster(config: MemberConfig, members: list[Member]) -> dict[str, str]:
    """``--initial-cluster`` for a join: every member (etcd matches them by peer URL)."""
    return {
        member.name or (config.name if config.peer_url in member.peer_urls else f"{member.id:x}"): (
            member.peer_urls[0]
        )
        for member in members
        if member.peer_urls
    }


def _move_aside(
    config: MemberConfig,
    log: logging.Logger,
    what: str,
    *,
    suffix: str = "interrupted",
) -> None:
    aside = config.data_dir.with_name(
        f"{config.data_dir.name}.{suffix}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    )
    if aside.exists():  # moved aside twice within a second (a rebuild's crash, then another)
        aside = aside.with_name(f"{aside.name}-{time.monotonic_ns()}")
    config.data_dir.rename(aside)
    why = f"no {MEMBERSHIP_FILE}" if suffix == "interrupted" else "the cluster removed it"
    log.warning(
        "moved aside the etcd data of %s (%s): %s; delete it once this member serves",
        what,
        why,
        aside,
    )


@dataclass(frozen=True)
class _ClusterView:
    endpoint: str
    cluster_id: int
    members: list[Member]


def _other_endpoints(config: MemberConfig) -> list[str]:
    """Client endpoints of the other peers: their peer URL's host, this member's port."""
    endpoints = []
    for name, url in sorted(config.peers.items()):
        host = urlsplit(url).hostname
        if name != config.name and url != config.peer_url and host:
            endpoints.append(
                f"[{host}]:{config.client_port}" if ":" in host else f"{host}:{config.client_port}"
            )
    return endpoints


async def _ask_cluster(config: MemberConfig) -> _ClusterView | None:
    """The cluster as the first other peer that answers sees it (a learner cannot list
    members, so it does not count); None if none answers."""
    for endpoint in _other_endpoints(config):
        try:
            async with EtcdClient(
                [endpoint], config.credentials, timeout=ASK_TIMEOUT, attempts=1
            ) as client:
                status = await client.status()
                members = await client.members()
        except EtcdRequestError:
            continue
        return _ClusterView(endpoint, status.cluster_id, members)
    return None
