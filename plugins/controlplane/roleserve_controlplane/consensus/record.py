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
    │     ├── no WAL under data/ ──▶ MembershipRecordError (final): the data is lost
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

Moved aside means renamed to ``data.interrupted-<UTC time>`` with one WARNING line naming
it: never deleted. Peers are asked on their client port, the same as this member's (as on
every roleserve node), with the member's own certificate.
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
from roleserve_controlplane.consensus.errors import (
    EtcdRequestError,
    MembershipRecordError,
    NotAMemberError,
    PeersUnreachableError,
)
from roleserve_controlplane.consensus.membership import Membership
from roleserve_core.files import write_atomically

if TYPE_CHECKING:
    from roleserve_controlplane.consensus.member import MemberConfig

__all__ = ["MEMBERSHIP_FILE", "MemberMode", "MembershipRecord", "Start", "plan_start"]

MEMBERSHIP_FILE = "membership.json"
"""In the member's directory: written once the member's bootstrap or join committed."""

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
        _refuse_lost_data(config)
        await _refuse_unknown(config, record)
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


def _has_wal(config: MemberConfig) -> bool:
    """Whether etcd's data has a WAL (etcd creates it as ``wal.tmp`` and renames it only
    once complete, so ENOSPC while creating it leaves none)."""
    wal = config.data_dir / "member" / "wal"
    return wal.is_dir() and any(wal.glob("*.wal"))


def _refuse_lost_data(config: MemberConfig) -> None:
    if not _has_wal(config):
        raise MembershipRecordError(
            f"node {config.name}: {config.membership_file} says it is a member, but its etcd "
            f"data in {config.data_dir} is gone; remove the node's consensus_member role and "
            "give it again to rejoin"
        )


async def _refuse_unknown(config: MemberConfig, record: MembershipRecord) -> None:
    """Refuse to start a member the cluster, asked, does not know; if no peer answers (the
    whole cluster starting, or a one-member cluster), etcd's own data decides."""
    view = await _ask_cluster(config)
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
) -> None:
    aside = config.data_dir.with_name(
        f"{config.data_dir.name}.interrupted-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    )
    config.data_dir.rename(aside)
    log.warning(
        "moved aside the etcd data of %s (no %s): %s; delete it once this member serves",
        what,
        MEMBERSHIP_FILE,
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
