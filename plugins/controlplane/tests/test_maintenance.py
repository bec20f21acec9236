"""etcd's maintenance against real members: history older than the retention is compacted
(periods on the fake clock), databases shrink when defragmented one member at a time, a
watcher that fell behind starts over, and a NOSPACE alarm is cleared once the database fits
under the quota again."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import pytest

from roleserve_controlplane.consensus import (
    EtcdClient,
    EtcdMaintenance,
    EtcdRequestError,
    KeyValue,
    MaintenancePolicy,
    Member,
    MemberHealth,
    MemberStatus,
    RevisionCompactedError,
    WatchEvent,
)
from roleserve_controlplane.consensus.maintenance import RevisionHistory, defragmentation_plan
from roleserve_controlplane.testing import EtcdCluster, fill_database
from roleserve_core.testing import FakeClock, SupervisorRunner, poll_until

pytestmark = pytest.mark.anyio

RETENTION = 60.0
"""Seconds of history kept in these tests (on the fake clock)."""
CHURN = 2000
"""Changes of the churn: enough for megabytes of history."""
VALUE = b"x" * 1024

T = TypeVar("T")


def _returning(thing: T) -> Callable[[], Awaitable[T]]:
    """A look for ``poll_until`` at an object the test changes in place."""

    async def look() -> T:
        return thing

    return look


async def churn(client: EtcdClient, changes: int, *, keys: int = 20) -> int:
    """Change ``keys`` keys ``changes`` times in all, 20 at a time; the last revision."""
    revisions: list[int] = []

    async def writer(first: int) -> None:
        for index in range(first, changes, 20):
            revisions.append(await client.put(f"/nodes/n{index % keys}", VALUE + b"%d" % index))

    async with anyio.create_task_group() as tasks:
        for first in range(20):
            tasks.start_soon(writer, first)
    return max(revisions)


def maintenance_of(
    cluster: EtcdCluster, client: EtcdClient, clock: FakeClock, **policy: float
) -> EtcdMaintenance:
    """Maintenance of ``cluster`` keeping ``RETENTION`` s of history; defragmenting at any
    free space unless ``policy`` says otherwise."""
    options: dict[str, float] = {"defrag_free_bytes": 0, "defrag_free_ratio": 0.0}
    options.update(policy)
    return EtcdMaintenance(
        client,
        cluster.admin_credentials(),
        clock,
        MaintenancePolicy(retention=RETENTION, **options),  # type: ignore[arg-type]
    )


async def sizes(cluster: EtcdCluster) -> list[int]:
    """Each member's database size."""
    found = []
    for member in cluster.members:
        async with member.client(cluster.admin_credentials()) as client:
            found.append((await client.status()).db_size)
    return found


# -- decisions ------------------------------------------------------------------------


def test_compaction_goes_to_the_newest_revision_seen_before_the_retention() -> None:
    history = RevisionHistory()
    for at, revision in [(0.0, 10), (15.0, 50), (30.0, 50), (45.0, 90), (60.0, 120)]:
        history.remember(at, revision)
    assert history.due(59.0, RETENTION, compacted=0) is None
    assert history.due(75.0, RETENTION, compacted=0) == 50
    assert history.due(76.0, RETENTION, compacted=50) is None
    assert history.due(105.0, RETENTION, compacted=50) == 90
    assert history.seen == [(60.0, 120)]


def _health(
    name: str, size: int, in_use: int, *, learner: bool = False, answers: bool = True
) -> MemberHealth:
    """A member named ``m<i>`` with a database of ``size`` bytes, ``in_use`` of them used."""
    member = Member(int(name[1:]) + 1, name, (), (), learner)
    status = MemberStatus(
        member.id, 1, 0, 0, 0, "3.4", learner, (), db_size=size, db_size_in_use=in_use
    )
    return MemberHealth(member, status if answers else None)


def test_defragmentation_takes_members_past_both_thresholds_and_waits_while_degraded() -> None:
    policy = MaintenancePolicy(defrag_free_bytes=10, defrag_free_ratio=0.5)
    big, small, dense = _health("m0", 100, 20), _health("m1", 15, 8), _health("m2", 100, 60)
    due, reason = defragmentation_plan([big, small, dense], set(), policy)
    assert (due, reason) == ([big], None)
    # A NOSPACE alarm defragments its member whatever its free space (until cleared).
    assert defragmentation_plan([big, small, dense], {dense.member.id}, policy)[0] == [big, dense]
    silent = _health("m1", 15, 8, answers=False)
    assert defragmentation_plan([big, silent, dense], set(), policy) == (
        [],
        "member m1 does not answer",
    )
    learner = _health("m2", 100, 60, learner=True)
    assert defragmentation_plan([big, learner], set(), policy) == ([], "member m2 is a learner")


# -- against etcd ---------------------------------------------------------------------


async def test_a_churn_is_compacted_after_the_retention_and_defragmented(
    cluster: EtcdCluster, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "roleserve.consensus")
    await cluster.bootstrap()
    await cluster.join(1)
    await cluster.join(2)
    async with cluster.client() as client:
        # Half the file free: before the compaction, pages bbolt freed while it rewrote
        # them could be a few, and are no reason to defragment (a flake when it did).
        maintenance = maintenance_of(cluster, client, fake_clock, defrag_free_ratio=0.5)
        early = await churn(client, 100)
        last = await churn(client, CHURN)
        await maintenance.run_once()  # remembers the revision after the churn
        fake_clock.advance(RETENTION / 2)
        await maintenance.run_once()  # too recent: nothing compacted
        assert maintenance.statistics().compacted_revision == 0
        assert await client.get("/nodes/n0", revision=early) is not None
        grown = await sizes(cluster)
        fake_clock.advance(RETENTION / 2)
        await maintenance.run_once()
        assert maintenance.statistics().compacted_revision == last
        with pytest.raises(RevisionCompactedError, match="compacted"):
            await client.get("/nodes/n0", revision=early)
        assert await client.get("/nodes/n0", revision=last) is not None  # kept
        shrunk = await sizes(cluster)
    assert maintenance.statistics().defragmentations == 3
    assert all(after < before / 2 for before, after in zip(grown, shrunk, strict=True)), (
        grown,
        shrunk,
    )
    lines = [r.getMessage() for r in caplog.records if "defragmented" in r.getMessage()]
    assert sorted(line.split(":")[0] for line in lines) == [
        "defragmented etcd member m0",
        "defragmented etcd member m1",
        "defragmented etcd member m2",
    ]


async def test_a_small_compaction_on_a_quiet_cluster_is_defragmented_in_the_same_pass(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    # Fewer changes than etcd deletes in one batch: each member's compaction takes one
    # commit, and nothing is written after it but by the maintenance itself.
    await cluster.bootstrap()
    async with cluster.client() as client:
        maintenance = maintenance_of(cluster, client, fake_clock, defrag_free_ratio=0.5)
        await churn(client, 600)
        await maintenance.run_once()
        fake_clock.advance(RETENTION)
        await maintenance.run_once()
        compacted = maintenance.statistics()
        for _ in range(3):  # nothing written since but the maintenance's own marker
            fake_clock.advance(RETENTION)
            await maintenance.run_once()
    assert compacted.compacted_revision > 0
    assert compacted.defragmentations == 1
    assert maintenance.statistics() == compacted  # its own markers are not compacted


async def test_no_member_is_defragmented_while_one_does_not_answer(
    cluster: EtcdCluster,
    fake_clock: FakeClock,
    supervisor_runner: SupervisorRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "roleserve.consensus")
    await cluster.bootstrap()
    await cluster.join(1)
    await cluster.join(2)
    async with cluster.client() as client:
        maintenance = maintenance_of(cluster, client, fake_clock)
        await churn(client, 200)
        await maintenance.run_once()
        await supervisor_runner.stop(cluster.members[2].supervisor)
        fake_clock.advance(RETENTION)
        await maintenance.run_once()
    assert maintenance.statistics().compacted_revision > 0  # compaction needs no member
    assert maintenance.statistics().defragmentations == 0
    assert "etcd defragmentation waits: member m2 does not answer" in caplog.text


async def test_a_watcher_behind_a_compaction_starts_over_with_the_right_keys(
    cluster: EtcdCluster, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    await cluster.bootstrap()
    copy: dict[bytes, bytes] = {}
    loads: list[int] = []
    behind = anyio.Event()

    async def load(stored: Sequence[KeyValue], revision: int) -> None:
        loads.append(revision)
        if len(loads) == 1:
            await behind.wait()  # the watch will start from a revision compacted meanwhile
        copy.clear()
        copy.update({kv.key: kv.value for kv in stored})

    def apply(event: WatchEvent) -> None:
        copy[event.key] = event.value

    async with cluster.client() as client, anyio.create_task_group() as tasks:
        maintenance = maintenance_of(cluster, client, fake_clock)
        tasks.start_soon(lambda: client.mirror_prefix("/nodes/", load=load, apply=apply))
        await poll_until("the first load", _returning(loads))
        await churn(client, 500)
        await maintenance.run_once()
        fake_clock.advance(RETENTION)
        await maintenance.run_once()
        behind.set()
        await client.put("/nodes/late", b"after")
        stored, _ = await client.get_prefix("/nodes/")
        expected = {kv.key: kv.value for kv in stored}
        await poll_until("the copy is current", _returning(copy), lambda now: now == expected)
        tasks.cancel_scope.cancel()
    assert len(loads) == 2
    assert "fell behind a compaction" in caplog.text


async def test_the_nospace_alarm_is_cleared_once_the_database_fits_again(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    cluster.quota_backend_bytes = 4 * 1024**2
    await cluster.bootstrap()
    async with cluster.client() as client:
        maintenance = maintenance_of(
            cluster,
            client,
            fake_clock,
            defrag_free_bytes=1 << 30,
            quota_backend_bytes=cluster.quota_backend_bytes,  # etcd 3.4 does not say it
        )
        assert "quota_backend_bytes" in str(await fill_database(client))
        assert [alarm.kind for alarm in await client.alarms()] == ["NOSPACE"]
        await maintenance.run_once()
        fake_clock.advance(RETENTION)
        await maintenance.run_once()
        assert await client.alarms() == []
        assert maintenance.statistics().defragmentations >= 1  # by the alarm, not the bytes
        await client.put("/after", b"writes work again")


async def test_a_failed_defragmentation_names_the_member(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    gone = Member(9, "m9", (), ("https://127.0.0.1:1",), False)
    status = MemberStatus(9, 1, 0, 0, 0, "3.4", False, (), db_size=100, db_size_in_use=1)
    async with EtcdClient(["127.0.0.1:1"], cluster.admin_credentials()) as client:
        maintenance = maintenance_of(cluster, client, fake_clock)
        with anyio.fail_after(10), pytest.raises(EtcdRequestError) as failed:
            await maintenance._defragment(MemberHealth(gone, status))
    assert str(failed.value).startswith("defragmenting etcd member m9: etcd defragment: ")
