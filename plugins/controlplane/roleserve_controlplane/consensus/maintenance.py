"""Keeping etcd's database small: compaction, defragmentation, the backend quota.

etcd keeps every revision of every key until it is compacted, and a compacted database
keeps its file size until it is defragmented. Without both, a soak of 5,000 role changes
grew each member's database from 0.35 to 21 MB and gave nothing back; at that rate a
cluster reaches etcd's 2 GiB quota after about 500,000 changes, and then every write fails
(the NOSPACE alarm). The leading curator runs ``EtcdMaintenance`` (one place in the
cluster), every ``period`` on its clock::

    status of every member (Membership.list: database size, size in use, revision)
      │ remember (now, the newest revision)
      ▼
    compact to the newest revision remembered at least ``retention`` ago
      │ (KV.Compact, physical: the member serving it has freed the pages when it
      │ returns; the others, compacting on their own, once their sizes in use settle,
      │ read after a write of the revision to /maintenance/compacted: etcd counts the
      │ freed pages only at a later commit)
      ▼
    a member not answering, or a learner? ── yes ──▶ no defragmentation this period
      ▼ no
    each member whose free space passes the threshold (or that raised NOSPACE), ONE AT A
    TIME: defragment it alone, read its size again, log one line (before → after)
      ▼
    NOSPACE alarms of members whose database is under 90% of the quota now ──▶ cleared

Why not etcd's ``--auto-compaction-mode``: the retention is cluster configuration kept in
etcd (``ClusterConfiguration.history_retention``, set at bootstrap), while the flag is one
per member and changes only with a restart of each; etcd never defragments by itself, so a
client has to run anyway, and it must know when a compaction freed pages to defragment
after it; and here the fake clock drives the periods in tests, and the last compaction is
known for ``ctl consensus`` and the metrics. The scheme is the Kubernetes apiserver's
compactor: remember the revision seen at each period, and compact to the one older than
the retention, so between ``retention`` and ``retention + period`` of history is kept.

What the retention must keep: nodes never see etcd revisions (the curator serves
``Curator.Watch`` from its node cache, with a full backlog on each new stream); the
curator's own watches (the node cache, the revoked serials) start over from a fresh read
when they fall behind a compaction (``EtcdClient.mirror_prefix``), and the election's
watch of its predecessor looks again. So a compaction costs a lagging watcher one reload,
never a failure, and the default of 5 minutes is the apiserver's.

Defragmentation rewrites a member's database while the member answers nothing: it is done
to one member at a time, never while another member does not answer or is a learner (the
cluster is degraded: a defragmenting member could cost it its quorum). What happened is
kept in memory (``statistics``): a new leader knows nothing of its predecessor's passes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

import anyio

from roleserve_controlplane.consensus.client import Alarm, EtcdClient
from roleserve_controlplane.consensus.defaults import (
    DEFAULT_DEFRAG_FREE_BYTES,
    DEFAULT_DEFRAG_FREE_RATIO,
    DEFAULT_QUOTA_BACKEND_BYTES,
    DEFAULT_RETENTION,
    MaintenancePolicy,
)
from roleserve_controlplane.consensus.errors import (
    DatabaseFullError,
    EtcdRequestError,
    RevisionCompactedError,
)
from roleserve_controlplane.consensus.membership import MemberHealth, Membership, endpoint_of
from roleserve_core import Clock
from roleserve_core.identity import Credentials

__all__ = [
    "DEFAULT_DEFRAG_FREE_BYTES",
    "DEFAULT_DEFRAG_FREE_RATIO",
    "DEFAULT_QUOTA_BACKEND_BYTES",
    "DEFAULT_RETENTION",
    "EtcdMaintenance",
    "MaintenancePolicy",
    "MaintenanceStatistics",
    "RevisionHistory",
    "defragmentation_plan",
    "megabytes",
]

log = logging.getLogger("roleserve.consensus")

ALARM_CLEARED_BELOW = 0.9
"""A NOSPACE alarm is cleared once its member's database is below this share of the quota:
etcd raises it when a write would pass the quota, so a database just under it would raise
it again at the next write."""
BACKEND_COMMIT_WAIT = 0.3
"""Seconds between readings of the members' sizes in use after a compaction: etcd's
backend commits every 100 ms, and frees pages once the reads before it ended."""
COMPACTION_MARK_KEY = "/maintenance/compacted"
"""Where the leading curator writes the revision it compacted to, again at each reading of
the sizes after a compaction: the write makes every member commit (see ``_settled``). A
newest revision that is the last of these writes is not remembered for compaction: else a
quiet cluster would compact its own markers at every retention, for good."""
COMPACTION_SETTLE = 10.0
"""Seconds a pass waits at most for every member's size in use to settle after a
compaction; a member still compacting after that is defragmented at a later pass."""
DEFRAG_TIMEOUT = 120.0
"""Seconds a defragmentation may take (etcd rewrites about 100 MB/s to 1 GB/s)."""


def megabytes(size: int) -> str:
    """``21.0 MB``: sizes in the log."""
    return f"{size / 1e6:.1f} MB"


@dataclass
class RevisionHistory:
    """The revisions seen at each pass, to compact to the newest one older than the
    retention (the apiserver's compactor, in memory)."""

    seen: list[tuple[float, int]] = field(default_factory=list)
    """(time, revision), oldest first."""

    def remember(self, now: float, revision: int) -> None:
        if not self.seen or revision > self.seen[-1][1]:
            self.seen.append((now, revision))

    def due(self, now: float, retention: float, compacted: int) -> int | None:
        """The revision to compact to now (forgetting it and older ones), or None."""
        due = [revision for at, revision in self.seen if at <= now - retention]
        self.seen = [(at, revision) for at, revision in self.seen if at > now - retention]
        return due[-1] if due and due[-1] > compacted else None


def defragmentation_plan(
    members: Sequence[MemberHealth], alarmed: set[int], policy: MaintenancePolicy
) -> tuple[list[MemberHealth], str | None]:
    """The members to defragment, one after another, and else why none may be.

    A member that raised NOSPACE (in ``alarmed``) is defragmented at every pass until its
    alarm is cleared, thresholds or not: it is the only way back under the quota, the
    cluster refuses writes meanwhile anyway, and the size in use a member reports right
    after a compaction may not show the pages it freed yet.
    """
    for health in members:
        name = health.member.name or f"{health.member.id:x}"
        if health.status is None:
            return [], f"member {name} does not answer"
        if health.member.is_learner:
            return [], f"member {name} is a learner"
    due = [
        health
        for health in members
        if health.status is not None
        and (policy.wants_defragmentation(health.status) or health.member.id in alarmed)
    ]
    return due, None


@dataclass(frozen=True, slots=True)
class MaintenanceStatistics:
    """What the maintenance did since this curator leads."""

    compacted_revision: int = 0
    """The revision history was last compacted to; 0: not yet."""
    compacted_at: float = 0.0
    """Wall-clock seconds (``Clock.wall``) of that compaction; 0.0: not yet."""
    defragmentations: int = 0
    """Defragmentations that succeeded."""
    alarms_cleared: int = 0
    """NOSPACE alarms cleared."""


class EtcdMaintenance:
    """The leading curator's maintenance of etcd (see the module docstring).

    :param client: a client of the whole cluster (the leader's).
    :param credentials: to reach each member alone (status, defragmentation).
    """

    def __init__(
        self,
        client: EtcdClient,
        credentials: Credentials,
        clock: Clock,
        policy: MaintenancePolicy | None = None,
    ) -> None:
        self.client = client
        self.credentials = credentials
        self.clock = clock
        self.policy = policy or MaintenancePolicy()
        self.history = RevisionHistory()
        self._statistics = MaintenanceStatistics()
        self._skipped: str | None = None
        self._marked = 0
        """The revision of this maintenance's last write of ``COMPACTION_MARK_KEY``."""

    def statistics(self) -> MaintenanceStatistics:
        """What was done so far, for ``ctl consensus`` and the metrics."""
        return self._statistics

    async def run(self) -> None:
        """A pass every ``policy.period``, until cancelled; a pass that fails is logged
        and the next one tries again."""
        while True:
            try:
                await self.run_once()
            except EtcdRequestError as exc:
                log.warning("etcd maintenance: %s; trying again in %gs", exc, self.policy.period)
            await self.clock.sleep(self.policy.period)

    async def run_once(self) -> None:
        """One pass: compact, defragment, clear the alarms that may be."""
        membership = Membership(self.client, self.credentials)
        members = await membership.list()
        newest = max(
            (health.status.revision for health in members if health.status is not None),
            default=0,
        )
        if newest > self._marked:  # its own marker alone is nothing to compact
            self.history.remember(self.clock.now(), newest)
        compacted = await self._compact()
        if compacted is not None:
            members = await _settled(membership, self._marker(compacted))
        alarms = await self.client.alarms()
        nospace = {alarm.member_id for alarm in alarms if alarm.kind == "NOSPACE"}
        due, skipped = defragmentation_plan(members, nospace, self.policy)
        self._say_skipped(skipped)
        for health in due:
            await self._defragment(health)
        await self._clear_alarms([alarm for alarm in alarms if alarm.kind == "NOSPACE"])

    async def _compact(self) -> int | None:
        """Compact to the revision due, if one is; that revision, or None."""
        stats = self._statistics
        now = self.clock.now()
        revision = self.history.due(now, self.policy.retention, stats.compacted_revision)
        if revision is None:
            return None
        try:
            await self.client.compact(revision, physical=True, timeout=DEFRAG_TIMEOUT)
        except RevisionCompactedError:
            log.info("etcd history was already compacted past revision %d", revision)
        else:
            log.info(
                "compacted etcd history to revision %d (older than %gs)",
                revision,
                self.policy.retention,
            )
        self._statistics = replace(
            stats, compacted_revision=revision, compacted_at=self.clock.wall()
        )
        return revision

    def _marker(self, revision: int) -> Callable[[], Awaitable[None]]:
        """A write of ``revision`` to ``COMPACTION_MARK_KEY``; refused while a NOSPACE alarm
        is raised, when the alarmed members are defragmented whatever their sizes."""

        async def mark() -> None:
            with contextlib.suppress(DatabaseFullError):
                self._marked = await self.client.put(COMPACTION_MARK_KEY, str(revision))

        return mark

    def _say_skipped(self, reason: str | None) -> None:
        """Log why defragmentation waits, once per reason."""
        if reason is not None and reason != self._skipped:
            log.info("etcd defragmentation waits: %s", reason)
        self._skipped = reason

    async def _defragment(self, health: MemberHealth) -> None:
        """Defragment one member alone, and log its sizes before and after."""
        member, before = health.member, health.status
        assert before is not None
        name = member.name or f"{member.id:x}"
        endpoints = [endpoint_of(url) for url in member.client_urls]
        try:
            async with EtcdClient(endpoints, self.credentials, attempts=1) as direct:
                await direct.defragment(timeout=DEFRAG_TIMEOUT)
                after = await direct.status()
        except EtcdRequestError as exc:
            raise EtcdRequestError(f"defragmenting etcd member {name}: {exc}") from exc
        log.info(
            "defragmented etcd member %s: %s → %s (in use %s)",
            name,
            megabytes(before.db_size),
            megabytes(after.db_size),
            megabytes(after.db_size_in_use),
        )
        self._statistics = replace(
            self._statistics, defragmentations=self._statistics.defragmentations + 1
        )

    async def _clear_alarms(self, alarms: Sequence[Alarm]) -> None:
        """Clear each NOSPACE alarm whose member's database is under the quota now."""
        if not alarms:
            return
        sizes = {
            health.member.id: (health.member.name, health.status)
            for health in await Membership(self.client, self.credentials).list()
        }
        for alarm in alarms:
            name, status = sizes.get(alarm.member_id, ("", None))
            name = name or f"{alarm.member_id:x}"
            if status is None:
                continue  # not answering: judged at a later pass
            quota = status.db_size_quota or self.policy.quota_backend_bytes
            if status.db_size > ALARM_CLEARED_BELOW * quota:
                log.warning(
                    "etcd member %s: database %s still over its quota %s after compaction "
                    "and defragmentation; raise [plugins.controlplane] quota_backend_bytes "
                    "on every consensus node, or delete data",
                    name,
                    megabytes(status.db_size),
                    megabytes(quota),
                )
                continue
            await self.client.disarm(alarm)
            log.info(
                "cleared the NOSPACE alarm of etcd member %s (database %s, quota %s)",
                name,
                megabytes(status.db_size),
                megabytes(quota),
            )
            self._statistics = replace(
                self._statistics, alarms_cleared=self._statistics.alarms_cleared + 1
            )


async def _settled(
    membership: Membership, write: Callable[[], Awaitable[None]]
) -> list[MemberHealth]:
    """The members once the pages a compaction freed show in every member's size in use.

    The compaction request waited only for the member that served it: each member compacts
    its own database, in batches, when it applies the compaction. A member's size in use
    counts the pages freed by a commit only from the commit after it (bbolt keeps them
    pending while the read transaction of the commit before is open), and etcd commits only
    when something was written: on a quiet cluster a member whose compaction took one
    commit showed nothing freed for good, and was skipped (a CI run). Before that, a fixed
    wait let a follower still compacting under load look full, and so did two equal
    readings of a follower that had not applied the compaction yet. So every
    ``BACKEND_COMMIT_WAIT``, ``write`` writes (every member commits) and the sizes are read,
    until every member applied the raft log as far as the first reading knew it (which
    holds the compaction) and no member's size in use changed between two readings, for at
    most ``COMPACTION_SETTLE``.
    """
    deadline = anyio.current_time() + COMPACTION_SETTLE

    async def reading() -> list[MemberHealth]:
        await anyio.sleep(BACKEND_COMMIT_WAIT)
        await write()
        return await membership.list()

    members = await reading()
    logged = max((h.status.raft_index for h in members if h.status is not None), default=0)
    while anyio.current_time() < deadline:
        again = await reading()
        if _applied(members, logged) and _in_use(again) == _in_use(members):
            return again
        members = again
    return members


def _applied(members: list[MemberHealth], index: int) -> bool:
    """Whether every member that answered applied the raft log up to ``index``."""
    return all(
        health.status.raft_applied_index >= index for health in members if health.status is not None
    )


def _in_use(members: list[MemberHealth]) -> dict[int, int | None]:
    """Each member's size in use, None where it did not answer."""
    return {
        health.member.id: health.status.db_size_in_use if health.status is not None else None
        for health in members
    }
