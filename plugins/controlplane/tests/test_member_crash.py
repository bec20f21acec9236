"""A bootstrap or join interrupted at any step never yields two etcd clusters (issue 19
item 4): faults injected at each step (``ROLESERVE_TEST_FAULT``) or left as ENOSPC leaves
them, then a restart; real etcd must then show one cluster in which the node is a voter."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from roleserve_controlplane.consensus import (
    FAULT_VARIABLE,
    MemberConfig,
    Membership,
    MembershipRecord,
    MembershipRecordError,
)
from roleserve_controlplane.testing import CuratorCluster, EtcdCluster, wait_healthy_through_backoff
from roleserve_controlplane.testing.etcd import RunningMember
from roleserve_core import management_pb2
from roleserve_core.identity import Credentials
from roleserve_core.testing import FakeClock, wait_for_status

pytestmark = pytest.mark.anyio


async def learner_config(cluster: EtcdCluster, index: int) -> MemberConfig:
    """Member ``index``'s configuration, once the cluster added it as a learner (as the
    leader does when it gives a node the consensus_member role)."""
    config = cluster.config(index)
    async with cluster.client() as client:
        await Membership(client, cluster.admin_credentials()).add_learner(config.peer_url)
        members = await client.members()
    peers = {m.name or config.name: m.peer_urls[0] for m in members}
    return cluster.config(index, peers)


async def start_failing_once(
    cluster: EtcdCluster,
    config: MemberConfig,
    step: str,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> RunningMember:
    """Start ``config``'s member with a fault at ``step``; once it failed there, start it
    again without the fault; return it healthy."""
    monkeypatch.setenv(FAULT_VARIABLE, step)
    member = await cluster.start(config, wait=False)
    failed = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 1)
    assert failed.last_error is not None
    assert failed.last_error.type.endswith("InjectedFaultError"), failed.last_error
    monkeypatch.delenv(FAULT_VARIABLE)
    await wait_healthy_through_backoff(member.supervisor, "root", fake_clock, failed)
    return member


async def promote(cluster: EtcdCluster, member: RunningMember) -> None:
    """Promote ``member`` (its current ID: a retried join may have a new one)."""
    async with member.client(cluster.admin_credentials()) as own:
        status = await own.status()
    if status.is_learner:
        async with cluster.client() as client:
            await Membership(client, cluster.admin_credentials()).promote(status.member_id)


async def assert_one_cluster(
    cluster: EtcdCluster, names: set[str], credentials: Credentials | None = None
) -> None:
    """Every running member answers with the same cluster ID, and the member list is
    ``names``, all voters (asked with ``credentials``, by default the test CA's admin)."""
    credentials = credentials or cluster.admin_credentials()
    cluster_ids = set()
    for member in cluster.members:
        async with member.client(credentials) as own:
            cluster_ids.add((await own.status()).cluster_id)
    assert len(cluster_ids) == 1, f"{len(cluster_ids)} etcd clusters: {cluster_ids}"
    async with cluster.members[0].client(credentials) as client:
        members = await client.members()
    assert {(m.name, m.is_learner) for m in members} == {(name, False) for name in names}


def moved_aside(config: MemberConfig) -> list[str]:
    return sorted(p.name for p in config.directory.glob("data.interrupted-*"))


@pytest.mark.parametrize("step", ["join:started", "join:serving", "join:recorded"])
async def test_a_join_interrupted_at_each_step_ends_in_one_cluster(
    cluster: EtcdCluster, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    await cluster.bootstrap()
    config = await learner_config(cluster, 1)
    member = await start_failing_once(cluster, config, step, fake_clock, monkeypatch)
    await promote(cluster, member)
    await assert_one_cluster(cluster, {"m0", "m1"})
    record = MembershipRecord.load(config.membership_file)
    assert record is not None
    assert record.name == "m1"
    if step == "join:serving":  # data without a record: moved aside, never deleted
        assert len(moved_aside(config)) == 1
    if step == "join:recorded":  # the record makes it a restart: the data is kept
        assert moved_aside(config) == []


@pytest.mark.parametrize("step", ["bootstrap:started", "bootstrap:serving", "bootstrap:recorded"])
async def test_a_bootstrap_interrupted_at_each_step_ends_in_one_cluster(
    cluster: EtcdCluster, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    config = cluster.config(0)
    await start_failing_once(cluster, config, step, fake_clock, monkeypatch)
    await cluster.join(1)
    await assert_one_cluster(cluster, {"m0", "m1"})
    # served but unrecorded: nobody can have joined it, so it was set aside and begun anew
    assert len(moved_aside(config)) == (1 if step == "bootstrap:serving" else 0)


async def test_a_join_that_left_a_partial_member_directory_is_moved_aside_and_retried(
    cluster: EtcdCluster,
) -> None:
    """The reported fault: ENOSPC while etcd created its WAL left ``data/member`` without
    one; the next start ran etcd with ``--initial-cluster-state=new``, a second cluster."""
    await cluster.bootstrap()
    config = await learner_config(cluster, 1)
    (config.data_dir / "member" / "snap").mkdir(parents=True)  # no wal/: what ENOSPC left
    member = await cluster.start(config)
    async with member.client(cluster.admin_credentials()) as own:
        status = await own.status()
    async with cluster.members[0].client(cluster.admin_credentials()) as first:
        assert status.cluster_id == (await first.status()).cluster_id, "a second etcd cluster"
    await promote(cluster, member)
    await assert_one_cluster(cluster, {"m0", "m1"})
    [aside] = moved_aside(config)
    assert (config.directory / aside / "member" / "snap").is_dir()
    warnings = [
        e.message
        for e in member.supervisor.logtree.entries("root")
        if e.message.startswith("moved aside the etcd data of an interrupted join")
    ]
    assert len(warnings) == 1
    assert str(config.directory / aside) in warnings[0]


async def test_a_member_its_cluster_removed_refuses_to_start_etcd(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    """Its record says it joined; its peers' member list does not contain it."""
    await cluster.bootstrap()
    second = await cluster.join(1)
    async with second.client(cluster.admin_credentials()) as own:
        removed = (await own.status()).member_id
    async with cluster.members[0].client(cluster.admin_credentials()) as client:
        await Membership(client, cluster.admin_credentials()).remove(removed)
    # etcd stops by itself once removed; the supervisor starts the member again
    failed = await wait_for_status(second.supervisor, "root", lambda s: s.failures >= 1)
    assert failed.restart_in is not None
    fake_clock.advance(failed.restart_in)
    refused = await wait_for_status(second.supervisor, "root", lambda s: s.final, timeout=30)
    assert refused.last_error is not None
    assert refused.last_error.type.endswith("NotAMemberError")
    message = refused.last_error.message
    assert "\n" not in message
    assert message.startswith(f"node m1: its etcd member {removed:x} is not in the member list")
    assert "consensus_member role" in message
    assert second.runnable.program is None
    async with cluster.members[0].client(cluster.admin_credentials()) as client:
        assert [m.name for m in await client.members()] == ["m0"]


async def test_a_voter_whose_record_was_not_written_keeps_its_data(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    """Promoted by the leader before it wrote its record (it crashed in between): the
    cluster's answer is the record; moving a voter's data aside could cost the quorum."""
    await cluster.bootstrap()
    second = await cluster.join(1)
    async with cluster.client() as client:
        await client.put("/kept", "by the voter")
    recorded = MembershipRecord.load(second.config.membership_file)
    assert recorded is not None
    second.config.membership_file.unlink()
    second.kill()
    failed = await wait_for_status(second.supervisor, "root", lambda s: s.failures == 1)
    await wait_healthy_through_backoff(second.supervisor, "root", fake_clock, failed)
    assert moved_aside(second.config) == []
    adopted = MembershipRecord.load(second.config.membership_file)
    assert adopted == MembershipRecord("m1", recorded.cluster_id, recorded.member_id, "adopted")
    await assert_one_cluster(cluster, {"m0", "m1"})
    async with second.client(cluster.admin_credentials()) as own:
        kept = await own.get("/kept")
    assert kept is not None


async def test_a_member_whose_data_is_gone_refuses_to_start_etcd(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    """Its record says it is a member, but the WAL is gone: etcd, started, would found a
    new cluster (before records) or join as a member without its log. One line, retried
    (not final): a rebuild the operator asks for is found at the next start."""
    member = await cluster.bootstrap()
    config = member.config
    member.kill()
    failed = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 1)
    for wal in (config.data_dir / "member" / "wal").glob("*.wal"):
        wal.unlink()
    assert failed.restart_in is not None
    fake_clock.advance(failed.restart_in)
    refused = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 2)
    assert refused.last_error is not None
    assert refused.last_error.type.endswith("CorruptDataError")
    assert refused.last_error.message == (
        f"etcd's data in {config.data_dir} is corrupt (its write-ahead log is gone, though "
        "membership.json says this node is a member); rebuild it with `roleserve ctl "
        "consensus rebuild m0`: the member then moves it aside and rejoins as a learner"
    )
    assert not refused.final
    assert member.runnable.program is None


async def test_a_role_change_that_failed_after_adding_the_learner_reuses_it_when_retried(
    curators: CuratorCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader added the node's learner, then failed before writing the role: the retry
    finds the learner by its peer URL instead of adding a second one, and the node joins."""
    node = await curators.enrol(1)
    leader = await curators.leader()
    monkeypatch.setenv(FAULT_VARIABLE, "join:after-member-add")
    channel, management = curators.management(leader)
    async with channel:
        change = management_pb2.UpdateNodeRolesRequest.Change(role="consensus_member", assign=True)
        with pytest.raises(grpc.aio.AioRpcError):
            await management.UpdateNodeRoles(
                management_pb2.UpdateNodeRolesRequest(node_id=node.node_id, changes=[change])
            )
    monkeypatch.delenv(FAULT_VARIABLE)
    assert leader.member is not None
    etcd = leader.member.config.credentials  # the consensus CA is the cluster's own
    async with leader.member.client(etcd) as client:
        [learner] = [m for m in await client.members() if m.is_learner]
    assert learner.name == ""  # added, never started
    await curators.make_consensus_member(node)
    await assert_one_cluster(curators.etcd, {leader.node_id, node.node_id}, etcd)
    async with leader.member.client(etcd) as client:
        ids = {m.id for m in await client.members()}
    assert learner.id in ids


def test_an_unreadable_membership_record_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "membership.json"
    path.write_text('{"name": "m1", "cluster_id": "not a number"')
    with pytest.raises(MembershipRecordError) as refused:
        MembershipRecord.load(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: unreadable membership record (")
    assert message.endswith("restore it, or move the member directory aside to join again")
    assert "\n" not in message
    assert MembershipRecord.load(tmp_path / "absent.json") is None


async def test_a_clusters_only_member_without_a_record_restarts_on_its_data(
    cluster: EtcdCluster, fake_clock: FakeClock
) -> None:
    """Data from before membership records, on a node whose role names only itself: no
    peer to ask, and ``existing`` cannot found a cluster, so it restarts and is recorded."""
    member = await cluster.bootstrap()
    async with cluster.client() as client:
        await client.put("/kept", "before records")
    recorded = MembershipRecord.load(member.config.membership_file)
    assert recorded is not None
    member.config.membership_file.unlink()
    member.runnable.config = replace(member.config, peers={"m0": member.config.peer_url})
    member.kill()
    failed = await wait_for_status(member.supervisor, "root", lambda s: s.failures == 1)
    await wait_healthy_through_backoff(member.supervisor, "root", fake_clock, failed)
    assert moved_aside(member.config) == []
    assert MembershipRecord.load(member.config.membership_file) == replace(recorded, how="adopted")
    async with cluster.client() as client:
        kept = await client.get("/kept")
    assert kept is not None
