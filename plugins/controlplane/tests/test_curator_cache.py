"""The leader's node cache on real etcd: snapshot, fan-out of changes, coalescing for slow
readers, and recovery from a compacted watch."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

import anyio
import pytest

from roleserve_controlplane.consensus import EtcdClient, KeyValue
from roleserve_controlplane.curator import NodeCache, Subscription
from roleserve_controlplane.curator.cache import _Waker
from roleserve_controlplane.curator.state import node_key
from roleserve_controlplane.proto import state_pb2
from roleserve_core import common_pb2

pytestmark = pytest.mark.anyio

Batch = dict[str, state_pb2.NodeRecord | None]


def _record(node_id: str, generation: int = 0) -> state_pb2.NodeRecord:
    """A node record; ``generation`` tells its versions apart."""
    record = state_pb2.NodeRecord(id=node_id, state=common_pb2.NODE_STATE_UP)
    record.status.external_address = f"192.0.2.{generation}"
    return record


async def _put(client: EtcdClient, record: state_pb2.NodeRecord) -> int:
    return await client.put(node_key(record.id), record.SerializeToString())


@contextlib.asynccontextmanager
async def _running(cache: NodeCache) -> AsyncIterator[None]:
    """``cache.run()`` in the background, once its snapshot is loaded."""
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(cache.run)
        with anyio.fail_after(10):
            await cache.ready.wait()
        yield
        tasks.cancel_scope.cancel()


async def _read_until(
    subscription: Subscription, expected: Mapping[str, state_pb2.NodeRecord | None]
) -> None:
    """Read batches until every node in ``expected`` reached its expected state."""
    seen: Batch = {}
    with anyio.fail_after(10):
        while any(seen.get(node_id, ...) != record for node_id, record in expected.items()):
            seen.update(await subscription.next_batch())


async def _next_batch(subscription: Subscription) -> Batch:
    with anyio.fail_after(10):
        return await subscription.next_batch()


async def test_the_snapshot_holds_every_node_and_its_revision(etcd_client: EtcdClient) -> None:
    a, b = _record("node-a"), _record("node-b")
    await _put(etcd_client, a)
    await _put(etcd_client, b)
    await etcd_client.put("/nodesx", "not a node")
    last = await etcd_client.put("/join-keys/00", "node-a")
    cache = NodeCache(etcd_client)
    assert not cache.ready.is_set()
    async with _running(cache):
        assert cache.nodes == {"node-a": a, "node-b": b}
        assert cache.revision == last
        assert (cache.get("node-a"), cache.get("node-c")) == (a, None)
        assert cache.statistics() == {"nodes": 2, "subscriptions": 0, "slowest_pending": 0}


async def test_changes_reach_every_subscription(etcd_client: EtcdClient) -> None:
    await _put(etcd_client, _record("node-a"))
    cache = NodeCache(etcd_client)
    async with _running(cache):
        with cache.subscribe() as first, cache.subscribe() as second:
            changed, added = _record("node-a", 1), _record("node-b", 1)
            await _put(etcd_client, changed)
            revision = await _put(etcd_client, added)
            for subscription in (first, second):
                await _read_until(subscription, {"node-a": changed, "node-b": added})
            assert cache.nodes == {"node-a": changed, "node-b": added}
            assert cache.revision == revision


async def test_a_subscription_of_one_node_sees_only_that_node(etcd_client: EtcdClient) -> None:
    cache = NodeCache(etcd_client)
    async with _running(cache):
        with cache.subscribe("node-a") as mine, cache.subscribe() as everything:
            await _put(etcd_client, _record("node-b", 1))
            await _put(etcd_client, _record("node-a", 1))
            await _put(etcd_client, _record("node-b", 2))
            await _read_until(
                everything, {"node-a": _record("node-a", 1), "node-b": _record("node-b", 2)}
            )
            assert await _next_batch(mine) == {"node-a": _record("node-a", 1)}


async def test_a_deleted_node_arrives_as_a_tombstone(etcd_client: EtcdClient) -> None:
    await _put(etcd_client, _record("node-a"))
    await _put(etcd_client, _record("node-b"))
    cache = NodeCache(etcd_client)
    async with _running(cache):
        with cache.subscribe() as subscription:
            assert await etcd_client.delete(node_key("node-a"))
            assert await _next_batch(subscription) == {"node-a": None}
            assert cache.get("node-a") is None
            assert cache.statistics()["nodes"] == 1


async def test_a_slow_reader_gets_only_the_newest_state_of_each_node(
    etcd_client: EtcdClient,
) -> None:
    cache = NodeCache(etcd_client)
    async with _running(cache):
        with cache.subscribe() as slow, cache.subscribe() as fast:
            for generation in range(1, 21):
                await _put(etcd_client, _record("node-a", generation))
                if generation % 5 == 0:
                    await _put(etcd_client, _record("node-b", generation))
            newest = {"node-a": _record("node-a", 20), "node-b": _record("node-b", 20)}
            await _read_until(fast, newest)  # the cache has seen every change
            assert (slow.pending, fast.pending) == (2, 0)
            assert cache.statistics() == {"nodes": 2, "subscriptions": 2, "slowest_pending": 2}
            assert await _next_batch(slow) == newest
        assert cache.statistics()["subscriptions"] == 0


class _WatchDownAfterFirstLoad(NodeCache):
    """A cache that runs ``meanwhile`` once, between its first load and its watch: as if
    the watch had been down while ``meanwhile`` changed etcd."""

    def __init__(self, client: EtcdClient, meanwhile: Callable[[], Awaitable[None]]) -> None:
        super().__init__(client)
        self._meanwhile: Callable[[], Awaitable[None]] | None = meanwhile

    async def _load(self, stored: Sequence[KeyValue], revision: int) -> None:
        await super()._load(stored, revision)
        meanwhile, self._meanwhile = self._meanwhile, None
        if meanwhile is not None:
            await meanwhile()


async def test_a_watch_behind_a_compaction_reloads_and_reports_the_difference(
    etcd_client: EtcdClient, caplog: pytest.LogCaptureFixture
) -> None:
    same, gone, changed = _record("node-same"), _record("node-gone"), _record("node-changed")
    for record in (same, gone, changed):
        await _put(etcd_client, record)
    new_changed, added = _record("node-changed", 1), _record("node-added", 1)

    async def change_and_compact() -> None:
        assert set(await _next_batch(subscription)) == {same.id, gone.id, changed.id}
        await etcd_client.delete(node_key(gone.id))
        await _put(etcd_client, new_changed)
        await etcd_client.compact(await _put(etcd_client, added))

    cache = _WatchDownAfterFirstLoad(etcd_client, change_and_compact)
    with caplog.at_level(logging.WARNING), cache.subscribe() as subscription:
        async with _running(cache):
            assert await _next_batch(subscription) == {
                gone.id: None,
                changed.id: new_changed,
                added.id: added,
            }
            assert cache.nodes == {same.id: same, changed.id: new_changed, added.id: added}
            assert "fell behind a compaction" in caplog.text
            later = _record("node-same", 2)  # and the new watch follows changes again
            revision = await _put(etcd_client, later)
            assert await _next_batch(subscription) == {same.id: later}
            assert cache.revision == revision


async def test_a_change_wakes_the_changed_nodes_own_streams_first(
    etcd_client: EtcdClient,
) -> None:
    cache = NodeCache(etcd_client)
    woken: list[str] = []
    all_woken = anyio.Event()

    async def read(subscription: Subscription, name: str) -> None:
        await _next_batch(subscription)
        woken.append(name)
        if len(woken) == 51:
            all_woken.set()

    async with _running(cache), anyio.create_task_group() as tasks:
        with contextlib.ExitStack() as stack:
            for index in range(50):
                others = stack.enter_context(cache.subscribe(owner=f"node-{index}"))
                tasks.start_soon(read, others, f"node-{index}")
            own = stack.enter_context(cache.subscribe(owner="node-a"))
            tasks.start_soon(read, own, "node-a")
            await anyio.wait_all_tasks_blocked()  # every reader waits for its batch
            await _put(etcd_client, _record("node-a", 1))
            with anyio.fail_after(10):
                await all_woken.wait()
    assert woken[0] == "node-a"


async def test_the_changed_nodes_own_stream_is_offered_its_change_once(
    etcd_client: EtcdClient,
) -> None:
    """Not again when the other streams are offered it, a turn later: the node would
    receive its record twice."""
    cache = NodeCache(etcd_client)
    async with _running(cache):
        with cache.subscribe(owner="node-a") as own, cache.subscribe(owner="node-b") as other:
            await _put(etcd_client, _record("node-a", 1))
            assert list(await _next_batch(own)) == ["node-a"]
            assert list(await _next_batch(other)) == ["node-a"]
            await anyio.wait_all_tasks_blocked()
            assert (own.pending, other.pending) == (0, 0)


async def test_followers_of_every_node_are_woken_a_batch_per_turn_of_the_loop(
    etcd_client: EtcdClient,
) -> None:
    """Between two batches of woken streams, other work gets the loop: a task that yields
    at every step (as a heartbeat's answer waits its turn) runs between them, and never
    more than a batch of readers runs in a row. All at once, the 50 readers ran together:
    10,000 of them held the loop 1.4 s while each sent."""
    cache = NodeCache(etcd_client, wake_batch=10)
    ran: list[str] = []
    all_woken = anyio.Event()

    async def read(subscription: Subscription, name: str) -> None:
        await _next_batch(subscription)
        ran.append(name)
        if sum(entry != "other work" for entry in ran) == 50:
            all_woken.set()

    async def other_work() -> None:
        while not all_woken.is_set():
            ran.append("other work")
            await anyio.lowlevel.checkpoint()

    async with _running(cache), anyio.create_task_group() as tasks:
        with contextlib.ExitStack() as stack:
            for index in range(50):
                reader = stack.enter_context(cache.subscribe(owner=f"node-{index}"))
                tasks.start_soon(read, reader, f"node-{index}")
            await anyio.wait_all_tasks_blocked()  # every reader waits for its batch
            tasks.start_soon(other_work)
            await _put(etcd_client, _record("node-a", 1))
            with anyio.fail_after(10):
                await all_woken.wait()
    readers_in_a_row = [
        len(run) for run in "".join("r" if entry != "other work" else " " for entry in ran).split()
    ]
    assert sum(readers_in_a_row) == 50
    assert max(readers_in_a_row) <= 10


class _Woken:
    """The readers woken so far, and a way to wait for a number of them."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._changed = anyio.Event()

    def add(self, name: str) -> None:
        self.names.append(name)
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, count: int) -> None:
        with anyio.fail_after(10):
            while len(self.names) < count:
                await self._changed.wait()


@contextlib.asynccontextmanager
async def _a_change_to_readers(
    etcd_client: EtcdClient, cache: NodeCache, count: int, back: anyio.Event
) -> AsyncIterator[_Woken]:
    """``count`` followers of every node, then a change of node-a in etcd; the followers'
    readers, once woken, record it and wait for ``back`` before they come back for more
    (as a stream whose send has not completed). Yields the readers woken so far."""
    woken = _Woken()

    async def read(subscription: Subscription, name: str) -> None:
        await subscription.next_batch()
        woken.add(name)
        await back.wait()
        await subscription.next_batch()

    async with _running(cache), anyio.create_task_group() as tasks:
        with contextlib.ExitStack() as stack:
            for index in range(count):
                subscription = stack.enter_context(cache.subscribe(owner=f"node-{index}"))
                tasks.start_soon(read, subscription, f"node-{index}")
            await anyio.wait_all_tasks_blocked()
            await _put(etcd_client, _record("node-a", 1))
            yield woken
            tasks.cancel_scope.cancel()


async def test_the_next_batch_is_woken_once_the_last_came_back_for_more(
    etcd_client: EtcdClient,
) -> None:
    """What is woken and not yet sent stays within a batch: the completions of 10,000
    sends otherwise came back after the broadcast, ahead of the next request."""
    cache = NodeCache(etcd_client, wake_batch=10, stuck_after=600.0)
    back = anyio.Event()
    async with _a_change_to_readers(etcd_client, cache, 25, back) as woken:
        await woken.until(10)
        await anyio.wait_all_tasks_blocked()
        assert len(woken.names) == 10  # the others wait for these to come back
        back.set()
        await woken.until(25)


async def test_a_stream_that_does_not_come_back_holds_up_nobody_for_long(
    etcd_client: EtcdClient,
) -> None:
    """Readers whose sends never complete (clients that read nothing) stop counting
    against the batch after ``stuck_after``: every stream still gets the change."""
    cache = NodeCache(etcd_client, wake_batch=10, stuck_after=0.05)
    async with _a_change_to_readers(etcd_client, cache, 25, anyio.Event()) as woken:
        await woken.until(25)


async def test_a_stream_that_ended_while_queued_takes_no_place_in_the_batch() -> None:
    """Thousands of streams may end while a broadcast is queued (nodes cut off): woken,
    each would hold a place until it counted as stuck, the live ones waiting meanwhile."""
    waker = _Waker(batch=2, stuck_after=600.0)
    gone = [Subscription(None), Subscription(None)]
    live = [Subscription(None), Subscription(None)]
    got: list[Batch] = []

    async def read(subscription: Subscription) -> None:
        got.append(await subscription.next_batch())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            for subscription in live:
                tasks.start_soon(read, subscription)
            await anyio.wait_all_tasks_blocked()  # both wait for changes
            for subscription in (*gone, *live):
                subscription._offer("node-a", _record("node-a", 1), waker)
            for subscription in gone:
                subscription._end()
    assert got == [{"node-a": _record("node-a", 1)}] * 2


class _Reader:
    """A reader that takes batch after batch of one subscription, or stops for good after
    its first (as a stream whose send never completes)."""

    def __init__(self, subscription: Subscription, *, comes_back: bool = True) -> None:
        self.subscription = subscription
        self.comes_back = comes_back
        self.seen: set[str] = set()
        self._changed = anyio.Event()

    async def run(self) -> None:
        while True:
            self.seen.update(await self.subscription.next_batch())
            self._changed.set()
            self._changed = anyio.Event()
            if not self.comes_back:
                await anyio.sleep_forever()

    async def until_seen(self, node_id: str) -> None:
        with anyio.fail_after(10):
            while node_id not in self.seen:
                await self._changed.wait()


async def test_a_queued_stream_that_took_its_changes_meanwhile_takes_no_place() -> None:
    """Its own node's change woke it at once and it sent everything: woken again with
    nothing pending, it would not come back, and held the place until it counted as
    stuck (0.5 s for every such node in a status burst)."""
    waker = _Waker(batch=1, stuck_after=600.0)
    first, meanwhile, last = (_Reader(Subscription(None)) for _ in range(3))
    async with anyio.create_task_group() as tasks:
        for reader in (first, meanwhile, last):
            tasks.start_soon(reader.run)
        await anyio.wait_all_tasks_blocked()
        for reader in (first, meanwhile, last):
            reader.subscription._offer("node-y", _record("node-y", 1), waker)
        meanwhile.subscription._offer("node-m", _record("node-m", 1))  # its own: at once
        await meanwhile.until_seen("node-y")
        await last.until_seen("node-y")
        tasks.cancel_scope.cancel()


async def test_streams_that_never_come_back_hold_up_a_later_change_only_for_a_while() -> None:
    """The batch full of streams whose sends never complete, and nothing left queued: a
    later change must still reach the others once those count as stuck."""
    waker = _Waker(batch=2, stuck_after=0.05)
    stuck = [_Reader(Subscription(None), comes_back=False) for _ in range(2)]
    live = _Reader(Subscription(None))
    async with anyio.create_task_group() as tasks:
        for reader in (*stuck, live):
            tasks.start_soon(reader.run)
        await anyio.wait_all_tasks_blocked()
        for reader in stuck:
            reader.subscription._offer("node-a", _record("node-a", 1), waker)
        for reader in stuck:
            await reader.until_seen("node-a")
        live.subscription._offer("node-b", _record("node-b", 1), waker)
        await live.until_seen("node-b")
        tasks.cancel_scope.cancel()
