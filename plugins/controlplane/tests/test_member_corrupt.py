"""A member whose etcd data is corrupt (issue 11 item 7): real etcd, its WAL or database
damaged while it was stopped, says so in one line and waits for the operator; once the
cluster removed it and waits for it as a learner (what ``ctl consensus rebuild`` makes the
leader do), it moves its data aside, joins as that learner and catches up."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from roleserve_controlplane.consensus import Membership, MembershipRecord
from roleserve_controlplane.consensus import member as member_module
from roleserve_controlplane.consensus import record as record_module
from roleserve_controlplane.consensus.corruption import corrupt_data
from roleserve_controlplane.consensus.member import MemberConfig
from roleserve_controlplane.consensus.record import Start
from roleserve_controlplane.testing import (
    CuratorCluster,
    EtcdCluster,
    damage_wal,
    wait_healthy_through_backoff,
)
from roleserve_controlplane.testing.curator_api import CuratorApi
from roleserve_controlplane.testing.etcd import RunningMember
from roleserve_core import WAITING_FOR_OPERATOR, RunnableStatus, management_pb2
from roleserve_core.testing import FakeClock, poll_until, wait_for_status

pytestmark = pytest.mark.anyio

Member = management_pb2.GetConsensusStatusResponse.Member

ETCD_SAID = {
    "wal": ["discovery failed error=walpb: crc mismatch"],
    "wal-framing": ["discovery failed error=proto: Record: illegal tag -71303297 (wire type 5)"],
    "wal-framing-3.5": ["discovery failed error=proto: illegal wireType 6"],
    "wal-head": ["discovery failed error=wal: max entry size limit exceeded"],
    "db": [
        "failed to open database path=d/member/snap/db error=invalid database",
        "panic: failed to open database",
    ],
    "freepages": [
        "panic: freepages: failed to get all reachable pages (page 1234: out of bounds: 5)"
    ],
    "wal-truncated": ["panic: cannot use none as id"],
}
"""etcd's last error lines (as the member's parser makes them) for each damage, measured
with etcd 3.4.23 and 3.5.1 (``consensus.corruption``)."""


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("wal", "walpb: crc mismatch"),
        ("wal-framing", "proto: Record: illegal tag -71303297 (wire type 5)"),
        ("wal-framing-3.5", "proto: illegal wireType 6"),
        ("wal-head", "wal: max entry size limit exceeded"),
        ("db", "failed to open database: invalid database"),
        ("freepages", "freepages: failed to get all reachable pages (page 1234: out of bounds: 5)"),
        ("wal-truncated", "cannot use none as id"),
    ],
)
def test_etcds_lines_for_corrupt_data_are_named(tmp_path: Path, damage: str, reason: str) -> None:
    corrupt = corrupt_data(ETCD_SAID[damage], tmp_path / "data", "node-1")
    assert corrupt is not None
    assert str(corrupt) == (
        f"etcd's data in {tmp_path / 'data'} is corrupt ({reason}); rebuild it with "
        "`roleserve ctl consensus rebuild node-1`: the member then moves it aside and rejoins "
        "as a learner"
    )
    assert corrupt.reason == reason


def test_other_exits_are_not_corrupt_data(tmp_path: Path) -> None:
    for lines in (
        ["listen tcp 127.0.0.1:2380: bind: address already in use"],
        ["the member has been permanently removed from the cluster"],
        ["failed to commit tx error=write db: no space left on device"],
        [],
    ):
        assert corrupt_data(lines, tmp_path, "n") is None


def damage_wal_records(data_dir: Path) -> None:
    """Flip 64 bytes of the first WAL file's early records: a CRC mismatch."""
    damage_wal(data_dir, 64)


def damage_db(data_dir: Path) -> None:
    """Cut the bbolt database to 100 bytes: bbolt refuses it."""
    with (data_dir / "member" / "snap" / "db").open("r+b") as file:
        file.truncate(100)


def truncate_wal(data_dir: Path) -> None:
    """Cut the first WAL file to 40 bytes (etcd keeps a copy as ``*.wal.broken``, cuts
    the WAL at its last whole record, then panics, at each start)."""
    [wal, *_] = sorted((data_dir / "member" / "wal").glob("*.wal"))
    with wal.open("r+b") as file:
        file.truncate(40)


DAMAGE = {
    "wal": (damage_wal_records, "walpb: crc mismatch"),
    "db": (damage_db, "invalid database"),
    "wal-truncated": (truncate_wal, "cannot use none as id"),
}


async def three_voters(cluster: EtcdCluster) -> list[RunningMember]:
    members = [await cluster.bootstrap(), await cluster.join(1), await cluster.join(2)]
    async with cluster.client() as client:
        await client.put("/written", "before the damage")
    return members


async def stopped_and_damaged(
    member: RunningMember, fake_clock: FakeClock, damage: str
) -> RunnableStatus:
    """Kill the member's etcd, damage its data while the supervisor's backoff holds it,
    start it again; its status once that start failed."""
    member.kill()
    failed = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 1)
    DAMAGE[damage][0](member.config.data_dir)
    assert failed.restart_in is not None
    fake_clock.advance(failed.restart_in)
    return await wait_for_status(member.supervisor, "root", lambda s: s.failures == 2, timeout=30)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_corrupt_data_is_one_line_then_a_rebuild_brings_the_member_back(
    cluster: EtcdCluster, fake_clock: FakeClock, damage: str
) -> None:
    _, _, third = await three_voters(cluster)
    config = third.config
    recorded = MembershipRecord.load(config.membership_file)
    assert recorded is not None
    refused = await stopped_and_damaged(third, fake_clock, damage)
    assert refused.last_error is not None
    assert refused.last_error.type.endswith("CorruptDataError")
    message = refused.last_error.message
    assert "\n" not in message
    assert message.startswith(f"etcd's data in {config.data_dir} is corrupt (")
    assert DAMAGE[damage][1] in message
    assert message.endswith(
        "rebuild it with `roleserve ctl consensus rebuild m2`: the member then moves it "
        "aside and rejoins as a learner"
    )
    [logged] = [
        entry
        for entry in third.supervisor.logtree.entries("root")
        if entry.level >= logging.ERROR and entry.message.startswith(WAITING_FOR_OPERATOR)
    ]
    assert logged.message.split("; restarting in")[0] == WAITING_FOR_OPERATOR + message
    assert logged.exc_text is None  # no traceback
    assert not refused.final  # retried: its next start finds the rebuild

    # Restarted without a rebuild: the same line again, the data left as it is.
    assert refused.restart_in is not None
    fake_clock.advance(refused.restart_in)
    again = await wait_for_status(third.supervisor, "root", lambda s: s.failures == 3, timeout=30)
    assert again.last_error is not None
    assert again.last_error.type.endswith("CorruptDataError")
    assert again.last_error.message == message
    assert not again.final
    assert not list(config.directory.glob("data.removed-*"))

    # What the leader does for `ctl consensus rebuild m2`.
    async with cluster.members[0].client(cluster.admin_credentials()) as client:
        membership = Membership(client, cluster.admin_credentials())
        await membership.remove(recorded.member_id)
        learner = await membership.add_learner(config.peer_url)
    await wait_healthy_through_backoff(third.supervisor, "root", fake_clock, again)
    [aside] = config.directory.glob("data.removed-*")
    assert (aside / "member" / "wal").is_dir()  # the damaged data, kept
    async with third.client(cluster.admin_credentials()) as own:
        status = await own.status()
    assert (status.member_id, status.is_learner) == (learner.id, True)
    async with cluster.members[0].client(cluster.admin_credentials()) as client:
        await Membership(client, cluster.admin_credentials()).promote(learner.id)
        members = await client.members()
    assert sorted((m.name, m.is_learner) for m in members) == [
        ("m0", False),
        ("m1", False),
        ("m2", False),
    ]
    async with third.client(cluster.admin_credentials()) as own:
        kept = await own.get("/written")
    assert kept is not None
    assert kept.value == b"before the damage"
    rebuilt = MembershipRecord.load(config.membership_file)
    assert rebuilt is not None
    assert (rebuilt.member_id, rebuilt.cluster_id) == (learner.id, recorded.cluster_id)


async def test_a_member_removed_without_a_learner_waiting_is_still_refused(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    """Only a learner that waits at its peer URL makes a removed member rebuild itself: a
    member whose role was taken away must not come back."""
    _, _, third = await three_voters(cluster)
    recorded = MembershipRecord.load(third.config.membership_file)
    assert recorded is not None
    third.kill()
    failed = await wait_for_status(third.supervisor, "root", lambda s: s.failures == 1)
    async with cluster.members[0].client(cluster.admin_credentials()) as client:
        await Membership(client, cluster.admin_credentials()).remove(recorded.member_id)
    assert failed.restart_in is not None
    fake_clock.advance(failed.restart_in)
    refused = await wait_for_status(third.supervisor, "root", lambda s: s.final, timeout=30)
    assert refused.last_error is not None
    assert refused.last_error.type.endswith("NotAMemberError")
    assert not list(third.config.directory.glob("data.removed-*"))


async def test_the_leaders_rebuild_brings_a_corrupt_member_back_as_a_voter(
    curators: CuratorCluster, fake_clock: FakeClock
) -> None:
    """``Management.RebuildConsensusMember`` on a real curator: the member with a damaged
    WAL rejoins as the learner the leader added, and the leader promotes it."""
    await curators.add_consensus(1)
    third = await curators.add_consensus(2)
    assert third.member is not None
    api = CuratorApi(curators)
    again = await stopped_and_damaged(third.member, fake_clock, "wal")
    assert again.last_error is not None
    assert again.last_error.type.endswith("CorruptDataError")
    async with api.management() as management:
        request = management_pb2.RebuildConsensusMemberRequest(node_id=third.node_id)
        done = (await management.RebuildConsensusMember(request)).done
    assert done.startswith("removed member ")
    assert f"at https://{third.address}:7837: node {third.node_id} moves its etcd data" in done
    async with api.management() as management:  # asked twice: the learner is there already
        request = management_pb2.RebuildConsensusMemberRequest(node_id=third.node_id)
        twice = (await management.RebuildConsensusMember(request)).done
    assert twice.endswith(f"already waits for node {third.node_id} to join")
    await wait_healthy_through_backoff(third.member.supervisor, "root", fake_clock, again)

    async def all_voters() -> bool:
        async with api.management() as management:
            status = await management.GetConsensusStatus(management_pb2.GetConsensusStatusRequest())
        return sorted(m.status for m in status.members) == [Member.FULL] * 3

    await poll_until("three voters", all_voters)
    assert len(list(third.member.config.directory.glob("data.removed-*"))) == 1


async def test_a_member_removed_while_its_etcd_starts_is_rebuilt(
    cluster: EtcdCluster, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a CI run lost: the rebuild (remove, add a learner) lands after the member
    planned its start and before its etcd heard from a leader. etcd, its log cut back to
    its days as a learner, then knows no peer, and no leader contacts a removed member: it
    would wait for one for ever. The member asks the cluster again while etcd does not
    serve, and starts again, which rebuilds it."""
    _, _, third = await three_voters(cluster)
    config = third.config
    recorded = MembershipRecord.load(config.membership_file)
    assert recorded is not None
    third.kill()
    failed = await wait_for_status(third.supervisor, "root", lambda s: s.failures == 1)
    # Cut mid-record: etcd repairs the WAL back to its last whole record (of its first
    # entries), as it did with the damage of the end-to-end test.
    [wal, *_] = sorted((config.data_dir / "member" / "wal").glob("*.wal"))
    with wal.open("r+b") as file:
        file.truncate(300)

    planned = record_module.plan_start
    rebuilds: list[int] = []

    async def rebuilt_once_planned(member_config: MemberConfig, log: logging.Logger) -> Start:
        start = await planned(member_config, log)
        if not rebuilds:
            async with cluster.members[0].client(cluster.admin_credentials()) as client:
                membership = Membership(client, cluster.admin_credentials())
                await membership.remove(recorded.member_id)
                rebuilds.append((await membership.add_learner(config.peer_url)).id)
        return start

    monkeypatch.setattr(member_module, "plan_start", rebuilt_once_planned)
    assert failed.restart_in is not None
    fake_clock.advance(failed.restart_in)
    removed = await wait_for_status(third.supervisor, "root", lambda s: s.failures == 2, timeout=30)
    assert removed.last_error is not None
    assert removed.last_error.type.endswith("RebuildWaitingError"), removed.last_error
    await wait_healthy_through_backoff(third.supervisor, "root", fake_clock, removed)
    async with third.client(cluster.admin_credentials()) as own:
        status = await own.status()
    assert (status.member_id, status.is_learner) == (rebuilds[0], True)
    assert len(list(config.directory.glob("data.removed-*"))) == 1
