"""Leader election on a real etcd lease: one leader at a time, failover, loss noticed."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from roleserve_controlplane.consensus import (
    Campaign,
    Election,
    EtcdClient,
    KeyValue,
    Leader,
    Leadership,
    LeadershipLostError,
    put_operation,
)
from roleserve_controlplane.testing import EtcdCluster

pytestmark = pytest.mark.anyio

TTL = 2
"""Seconds: short, so failover tests are quick; the waits below allow several TTLs."""


async def test_one_contender_leads_the_other_waits_then_takes_over(cluster: EtcdCluster) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        election = Election(client, "/election/test", ttl=TTL)
        send, leaders = anyio.create_memory_object_stream[Leader | None](10)
        b_leads = anyio.Event()

        async def observe() -> None:
            async with send, contextlib.aclosing(election.observe()) as observed:
                async for leader in observed:
                    await send.send(leader)

        async def contend_b() -> None:
            async with election.campaign(b"b"):
                b_leads.set()
                await anyio.sleep_forever()

        async with anyio.create_task_group() as tasks, leaders:
            async with election.campaign(b"a") as a:
                tasks.start_soon(observe)
                assert await _next(leaders) == Leader(a.key, b"a", a.create_revision)
                tasks.start_soon(contend_b)
                await _wait_for_candidates(election, [b"a", b"b"])  # b waits in line
                assert not b_leads.is_set()
                assert (await election.leader()) == Leader(a.key, b"a", a.create_revision)
            with anyio.fail_after(10):
                await b_leads.wait()  # a resigned by leaving the block: b leads at once
            b_leader = await _next(leaders)
            assert b_leader is not None
            assert b_leader.value == b"b"
            tasks.cancel_scope.cancel()


async def test_killing_the_winners_member_hands_over_within_the_ttl(cluster: EtcdCluster) -> None:
    m0 = await cluster.bootstrap()
    m1 = await cluster.join(1)
    m2 = await cluster.join(2)
    credentials = cluster.admin_credentials()
    a_client = EtcdClient([m0.config.endpoint], credentials, timeout=1.0)
    b_client = EtcdClient([m1.config.endpoint, m2.config.endpoint], credentials, timeout=1.0)
    async with a_client, b_client:
        a_election = Election(a_client, "/election/failover", ttl=TTL)
        b_election = Election(b_client, "/election/failover", ttl=TTL)
        b_leads = anyio.Event()

        async def contend_b() -> None:
            async with b_election.campaign(b"b"):
                b_leads.set()
                await anyio.sleep_forever()

        async with a_election.campaign(b"a") as a, anyio.create_task_group() as tasks:
            tasks.start_soon(contend_b)
            await _wait_for_candidates(b_election, [b"a", b"b"])
            m0.kill()  # a's only etcd member: a can no longer renew its lease
            with anyio.fail_after(3 * TTL):
                await a.lost.wait()
            with pytest.raises(LeadershipLostError, match="was lost"):
                a.check()
            with anyio.fail_after(3 * TTL):
                await b_leads.wait()
            assert (await b_election.leader()) is not None
            tasks.cancel_scope.cancel()


async def test_a_candidate_whose_lease_lapsed_campaigns_again_without_a_word(
    cluster: EtcdCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """What a follower's curator meets when resumed after a pause longer than the TTL: etcd
    expired its campaign lease. It never led, so nothing is lost: it campaigns again on a
    new lease and logs nothing above DEBUG. It logged an ERROR "could not be renewed in
    time: leadership lost", and its curator failed (LeadershipLostError)."""
    await cluster.bootstrap()
    async with cluster.client() as client:
        election = Election(client, "/election/lapse", ttl=TTL)
        b_leads = anyio.Event()

        async def contend_b() -> None:
            async with election.campaign(b"b") as b:
                assert b.cause == ""
                b_leads.set()
                await anyio.sleep_forever()

        async with anyio.create_task_group() as tasks:
            async with election.campaign(b"a"):
                tasks.start_soon(contend_b)
                [_, first] = await _wait_for_candidates(election, [b"a", b"b"])
                await client.revoke_lease(first.lease)  # as etcd expires a paused one's
                await _wait_for_candidates(
                    election, [b"a", b"b"], lambda keys: keys[1].lease != first.lease
                )
                assert not b_leads.is_set()
            with anyio.fail_after(10):
                await b_leads.wait()  # a resigned: b, campaigning again, leads
            tasks.cancel_scope.cancel()
    loud = [
        r for r in caplog.records if r.name.startswith("roleserve") and r.levelno > logging.INFO
    ]
    assert loud == []


async def test_a_leader_whose_lease_expired_is_told_why(cluster: EtcdCluster) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        election = Election(client, "/election/expired", ttl=TTL)
        async with election.campaign(b"a") as a:
            await client.revoke_lease(a.lease)
            with anyio.fail_after(3 * TTL):
                await a.lost.wait()
            assert a.cause == "etcd says its lease expired"


async def test_a_leader_that_cannot_resign_says_so(
    cluster: EtcdCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Leaving the block revokes the lease; when etcd is gone (its member stopped first,
    as a node's shutdown used to), one WARNING says that the next leader waits for the
    lease to expire: the failed revoke went without a word, and the wait was a mystery."""
    member = await cluster.bootstrap()
    async with cluster.client(attempts=1) as client:
        election = Election(client, "/election/unresigned", ttl=TTL)
        async with election.campaign(b"a"):
            await member.stop()
    said = [r for r in caplog.records if r.name == "roleserve.consensus"]
    [warning] = [r for r in said if r.levelno >= logging.WARNING]
    assert warning.getMessage().startswith("could not resign the lead of /election/unresigned/ (")
    assert warning.getMessage().endswith(f"the next leader waits until the lease expires ({TTL} s)")


async def test_a_restarted_candidate_does_not_wait_for_its_own_stale_key(
    cluster: EtcdCluster,
) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        election = Election(client, "/election/stale", ttl=60)
        # What a crashed earlier run of this node left: its key, on a lease that lives on.
        lease = await client.grant_lease(60)
        await client.put(f"/election/stale/{lease:016x}", "node-a", lease=lease)
        with anyio.fail_after(10):  # far less than the stale lease's 60 s
            async with election.campaign(b"node-a") as leadership:
                candidates, _ = await election.candidates()
                assert [kv.key for kv in candidates] == [leadership.key]


async def test_the_guard_fences_writes_to_the_current_leadership(cluster: EtcdCluster) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        election = Election(client, "/election/guard", ttl=TTL)
        async with election.campaign(b"a") as leadership:
            assert await _guarded_put(client, leadership, "while leading")
        assert not await _guarded_put(client, leadership, "after resigning")
        value = await client.get("/guarded")
    assert value is not None
    assert value.value == b"while leading"


async def _guarded_put(client: EtcdClient, leadership: Leadership, value: str) -> bool:
    result = await client.transaction([leadership.guard()], [put_operation("/guarded", value)])
    return result.succeeded


async def _next(leaders: MemoryObjectReceiveStream[Leader | None]) -> Leader | None:
    with anyio.fail_after(10):
        return await leaders.receive()


async def _wait_for_candidates(
    election: Election, expected: list[bytes], check: Callable[[list[KeyValue]], bool] = bool
) -> list[KeyValue]:
    """Wait (up to 10 s) until the campaign keys hold exactly ``expected``, in order, and
    pass ``check``; them."""

    def done(candidates: list[KeyValue]) -> bool:
        return [kv.value for kv in candidates] == expected and check(candidates)

    with anyio.fail_after(10):
        candidates, revision = await election.candidates()
        if done(candidates):
            return candidates
        watch = election.client.watch_prefix(election.prefix, start_revision=revision + 1)
        async with contextlib.aclosing(watch):
            async for _ in watch:
                candidates, _ = await election.candidates()
                if done(candidates):
                    return candidates
    raise AssertionError("the watch of the campaign keys ended")


async def test_a_wait_for_the_predecessor_behind_a_compaction_looks_again(
    etcd_client: EtcdClient,
) -> None:
    """The watch of the predecessor's key starts after the candidates were read; a
    compaction in between (the leader's maintenance) ends the wait, so that the candidate
    reads the candidates again, rather than failing its campaign."""
    election = Election(etcd_client, "/election/test", ttl=TTL)
    read_at = await etcd_client.put("/election/test/predecessor", b"a")
    await etcd_client.put("/other", b"x")
    await etcd_client.compact(await etcd_client.put("/other", b"y"))
    with anyio.fail_after(10), anyio.CancelScope() as scope:
        await Campaign(election, b"b")._until_deleted(b"/election/test/a", read_at, scope)
    assert scope.cancel_called
