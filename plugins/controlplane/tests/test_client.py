"""The etcd adapter against a real member: keys, revisions, transactions, watches,
leases, and errors that name the request."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
from typing import Any

import anyio
import grpc
import pytest

from roleserve_controlplane.consensus import (
    EtcdClient,
    EtcdRequestError,
    EventKind,
    WatchCompactedError,
    WatchEvent,
    compare_value,
    compare_version,
    get_operation,
    put_operation,
)
from roleserve_controlplane.consensus.client import operation_of
from roleserve_controlplane.curator.raftleader import RaftLeaderKeeper, hand_off_raft_leadership
from roleserve_controlplane.testing import EtcdCluster
from roleserve_core.testing import ThrowawayCA, poll_until

pytestmark = pytest.mark.anyio


async def test_keys_and_revisions(cluster: EtcdCluster) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        first = await client.put("/nodes/a", "1")
        second = await client.put("/nodes/b", "2")
        await client.put("/other", "x")
        keys, revision = await client.get_prefix("/nodes/")
        assert [(kv.key, kv.value, kv.mod_revision) for kv in keys] == [
            (b"/nodes/a", b"1", first),
            (b"/nodes/b", b"2", second),
        ]
        assert revision == second + 1  # read after the put of /other
        assert await client.delete("/nodes/a")
        assert not await client.delete("/nodes/a")
        assert await client.get("/nodes/a") is None


async def test_transactions_run_one_branch_atomically(cluster: EtcdCluster) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        created = await client.transaction(
            [compare_version("/ticket", "=", 0)], [put_operation("/ticket", "first")]
        )
        again = await client.transaction(
            [compare_version("/ticket", "=", 0)],
            [put_operation("/ticket", "second")],
            [get_operation("/ticket")],
        )
        matched = await client.transaction(
            [compare_value("/ticket", "=", "first")], [put_operation("/ticket", "third")]
        )
        value = await client.get("/ticket")
    assert (created.succeeded, again.succeeded, matched.succeeded) == (True, False, True)
    assert again.responses[0].response_range.kvs[0].value == b"first"
    assert value is not None
    assert (value.value, value.version) == (b"third", 2)


async def test_watch_prefix_sees_changes_from_a_revision(cluster: EtcdCluster) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        before = await client.put("/watched/a", "old")
        _, revision = await client.get_prefix("/watched/")
        seen: list[WatchEvent] = []
        watch = client.watch_prefix("/watched/", start_revision=revision + 1)
        async with contextlib.aclosing(watch):
            changed = await client.put("/watched/a", "new")
            await client.put("/elsewhere", "ignored")
            await client.delete("/watched/a")
            with anyio.fail_after(10):
                async for events in watch:
                    seen.extend(events)
                    if len(seen) == 2:
                        break
    assert [(e.kind, e.key, e.value) for e in seen] == [
        (EventKind.PUT, b"/watched/a", b"new"),
        (EventKind.DELETE, b"/watched/a", b""),
    ]
    assert seen[0].revision == changed
    assert seen[0].create_revision == before


async def test_a_watch_from_a_compacted_revision_says_so(cluster: EtcdCluster) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        old = await client.put("/history", "1")
        latest = await client.put("/history", "2")
        await client.compact(latest)
        watch = client.watch_prefix("/history", start_revision=old)
        async with contextlib.aclosing(watch):
            with anyio.fail_after(10), pytest.raises(WatchCompactedError) as caught:
                await anext(watch)
    assert caught.value.compact_revision == latest


def request_streams() -> set[asyncio.Task[None]]:
    """grpc.aio's tasks that send a stream's requests (one per call with a request
    iterator), still pending."""
    return {
        task
        for task in asyncio.all_tasks()
        if not task.done()
        and "_consume_request_iterator" in getattr(task.get_coro(), "__qualname__", "")
    }


async def test_a_watch_the_server_ended_leaves_no_request_task_behind(
    cluster: EtcdCluster,
) -> None:
    """When etcd ends a watch (here it dies), the task grpc sends the watch's requests
    from ends too. etcd3aio's never did: grpc cancels it only with a call still running,
    and the task, collected later, failed a test with "aclose(): asynchronous generator is
    already running"."""
    member = await cluster.bootstrap()
    async with cluster.client() as client:
        _, revision = await client.get_prefix("/watched/")
        seen: list[WatchEvent] = []
        before = request_streams()
        watch = client.watch_prefix("/watched/", start_revision=revision + 1)

        async def follow() -> None:
            async for events in watch:
                seen.extend(events)

        async with contextlib.aclosing(watch), anyio.create_task_group() as tasks:
            tasks.start_soon(follow)
            await client.put("/watched/a", "1")
            await poll_until("the watch saw the put", lambda: seen_any(seen))
            streaming = request_streams() - before
            assert streaming  # the watch's own
            member.kill()
            await poll_until("its request task ended", lambda: ended(streaming))
            tasks.cancel_scope.cancel()


async def seen_any(seen: list[WatchEvent]) -> bool:
    return bool(seen)


async def ended(tasks: set[asyncio.Task[None]]) -> bool:
    return all(task.done() for task in tasks)


async def test_leases_expire_their_keys_unless_kept_alive(cluster: EtcdCluster) -> None:
    await cluster.bootstrap()
    async with cluster.client() as client:
        lease = await client.grant_lease(30)
        await client.put("/leased", "x", lease=lease)
        assert await client.keep_alive(lease) > 0
        stored = await client.get("/leased")
        assert stored is not None
        assert stored.lease == lease
        await client.revoke_lease(lease)
        assert await client.get("/leased") is None
        assert await client.keep_alive(lease) <= 0  # revoked: nothing left to renew


async def test_the_client_does_not_probe_the_bandwidth(monkeypatch: pytest.MonkeyPatch) -> None:
    """Like every roleserve channel (``rpc.FLOW_CONTROL_OPTIONS``): a probe after each
    lease keep-alive's answer would wake etcd for one more round trip."""
    made: list[dict[str, object]] = []
    real = grpc.aio.secure_channel

    def recording(target: str, credentials: Any, options: list[tuple[str, Any]]) -> Any:
        made.append(dict(options))
        return real(target, credentials, options=options)

    monkeypatch.setattr(grpc.aio, "secure_channel", recording)
    async with EtcdClient(["127.0.0.1:1"], ThrowawayCA().node()):
        pass
    assert [options["grpc.http2.bdp_probe"] for options in made] == [0]


async def test_an_unreachable_cluster_gives_an_error_naming_the_request(
    cluster: EtcdCluster,
) -> None:
    nobody = ipaddress.IPv4Address("127.0.0.1") + 200  # nothing listens on 127.0.0.201:1
    async with EtcdClient([f"{nobody}:1"], cluster.admin_credentials(), timeout=0.5) as client:
        with pytest.raises(EtcdRequestError, match="etcd get '/x'"):
            await client.get("/x")


@pytest.mark.parametrize(
    ("what", "operation"),
    [
        ("get b'/nodes/x'", "get"),
        ("get prefix b'/nodes/'", "get prefix"),
        ("transaction", "transaction"),
        ("grant lease of 3s", "grant lease of"),
        ("add learner https://127.0.0.1:7837", "add learner"),
        ("put '/leader'", "put"),
    ],
)
def test_a_requests_operation_is_its_words_before_the_arguments(what: str, operation: str) -> None:
    """The label of the curator's etcd latency: bounded, whatever the keys."""
    assert operation_of(what) == operation


async def test_a_keepalive_left_unanswered_fails_as_a_request_not_a_cancellation(
    cluster: EtcdCluster,
) -> None:
    """A renewal that etcd does not answer in time (a member without a quorum, or paused)
    raises EtcdRequestError. grpc re-raised the deadline's cancellation of its stream as a
    CancelledError of its own, which escaped ``fail_after``: the election's keep-alive task
    then ended as "cancelled", its task group swallowed the campaign's cancellation, and the
    curator's term ended before it was elected (UnboundLocalError on ``leadership``)."""
    member = await cluster.bootstrap()
    async with cluster.client() as client:
        lease = await client.grant_lease(30)
        program = member.runnable.program
        assert program is not None
        pid = program.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(EtcdRequestError, match="keepalive of lease"):
                await client.keep_alive(lease, timeout=0.5)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert await client.keep_alive(lease) > 0  # the client still works


async def test_a_curator_leaders_member_hands_raft_leadership_to_another_voter(
    cluster: EtcdCluster,
) -> None:
    """A crash of the leading curator's node should not also stop etcd's raft leader: the
    lease would then outlive it by a raft election (see curator/raftleader.py)."""
    first = await cluster.bootstrap()
    await cluster.join(1)
    await cluster.join(2)
    credentials = cluster.admin_credentials()
    async with first.client(credentials) as client:
        before = await client.status()
    assert before.leader == before.member_id  # the bootstrapped member leads raft
    moved = await hand_off_raft_leadership(first.config.endpoint, credentials)
    async with first.client(credentials) as client:
        after = await client.status()
    assert moved is not None
    assert moved != before.member_id
    assert after.leader == moved
    # Asked again, a member that does not lead raft leaves it where it is.
    assert await hand_off_raft_leadership(first.config.endpoint, credentials) is None


async def test_the_raft_leader_keeper_hands_off_once_a_voter_joins(cluster: EtcdCluster) -> None:
    """The curator that bootstrapped a cluster is its only voter when its term begins:
    nobody to hand raft's leadership to then. A voter that joins later (a promoted learner)
    is told to the keeper, which hands the leadership to it without waiting for its period
    (here an hour): ``cluster up``'s node 1 kept it, and its SIGKILL stacked a raft
    election on the lease."""
    first = await cluster.bootstrap()
    credentials = cluster.admin_credentials()
    keeper = RaftLeaderKeeper(first.config.endpoint, credentials, every=3600)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(keeper.run)
        await cluster.join(1)
        await cluster.join(2)

        async def raft_leader() -> int:
            async with first.client(credentials) as client:
                status = await client.status()
            return int(status.leader) if status.leader != status.member_id else 0

        keeper.voters_changed()
        moved = await poll_until("raft's leadership off the first member", raft_leader)
        tasks.cancel_scope.cancel()
    assert moved != 0
