"""The leader's view of every node: one etcd watch, fanned out to every Watch stream.

::

    etcd /nodes/ ──one watch──▶ NodeCache {id → NodeRecord}
                                    │ on each change, for each subscription that wants it:
                                    │ pending[id] = newest record (or a tombstone)
                                    ▼
                 Subscription ──next_batch()──▶ one WatchEvent to one client stream

Monogon backs every client Watch stream with an etcd watch of its own; with thousands of
nodes each holding several streams, that is thousands of etcd watches carrying the same
changes. Here the leader keeps one, and serves every stream from memory.

A subscription holds at most one pending entry per node: a slow reader that misses ten
changes of a node receives only the newest, so its buffer is bounded by the number of nodes,
not by the number of changes, and the cache never waits for it.

A change reaches the streams of the changed node itself first (a subscription's ``owner``):
at 10,000 nodes each watching every node, one change wakes 10,000 streams, and the node
whose roles changed should not wait behind the other 9,999 to learn it. The others are
offered the change in the event loop's next turn (grpc.aio serves on asyncio: so does
this), once the own streams' tasks have been woken.

The followers of every node are woken ``WAKE_BATCH`` at a time (``_Waker``): the next
ones once those came back for more, having sent. Not all at once: each woken stream holds
the loop while it sends (about 140 µs in grpc.aio), so 10,000 woken at once held it 1.4 s,
and whatever came next (the next role change's request and etcd event, every heartbeat)
waited behind the whole broadcast, or behind the completions of its sends. Offered at
once, woken in batches: a subscription's pending changes are complete and in order
whenever its reader runs, and a reader woken late sends the changes that came meanwhile
in the same event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TypeVar

import anyio

from roleserve_controlplane.consensus import EtcdClient, EventKind, KeyValue, WatchEvent
from roleserve_controlplane.curator.records import (
    NODES_PREFIX,
    join_record,
    joined,
    parse_node_key,
    parts_of,
)
from roleserve_controlplane.proto import state_pb2

__all__ = ["STUCK_AFTER", "WAKE_BATCH", "NodeCache", "Subscription"]

WAKE_BATCH = 256
"""Followers of every node woken and not yet done sending, at most: at most ~36 ms of the
loop's time (at ~140 µs a stream) ahead of a heartbeat's answer (goal 50 ms). At 10,000
nodes (``benchmarks/curator_load.py``), 128 made a status reach every node in 2.9 s, 256
in 2.0 s, a role change its node in 12–24 ms (median) either way."""
STUCK_AFTER = 0.5
"""Seconds after which a woken stream that has not come back for more no longer counts
against ``WAKE_BATCH``: its client reads nothing (gRPC's flow control holds its send)."""

Batch = dict[str, state_pb2.NodeRecord | None]
"""Node ID → its newest record, or None if it was deleted."""


class Subscription:
    """One stream's pending changes, coalesced per node."""

    def __init__(self, node_id: str | None, owner: str | None = None) -> None:
        self.node_id = node_id
        """Only this node's changes; None for every node."""
        self.owner = owner
        """The node whose stream this is, if a node's: its own changes reach it first."""
        self._pending: Batch = {}
        self._reader: asyncio.Future[None] | None = None
        """What the reader awaits while it waits for changes: one object per wait. (An
        anyio Event made anew at each wake was five, 50,000 at each change of a node at
        10,000 streams, each a young object for the collector to scan.)"""
        self._waking = False
        """Queued in a ``_Waker``: offered more meanwhile, it is not queued again."""
        self._woken_by: _Waker | None = None
        """The waker that woke it, until its reader comes back for more (or it ends)."""
        self.ended = False
        """Its stream ended: a waker that still holds it passes it over (woken, it would
        count against the batch until it counted as stuck)."""

    def _offer(
        self, node_id: str, record: state_pb2.NodeRecord | None, waker: _Waker | None = None
    ) -> None:
        """Add the change to what is pending; wake the reader now, or through ``waker``."""
        if self.node_id is None or self.node_id == node_id:
            self._pending[node_id] = record
            if waker is None:
                self._wake_reader()
            elif not self._waking:
                self._waking = True
                waker.add(self)

    def _wake(self, waker: _Waker) -> None:
        """The waker's turn came."""
        self._waking = False
        self._woken_by = waker
        self._wake_reader()

    def _done(self) -> None:
        """Its reader came back for more, or it ended: the waker may wake another."""
        waker, self._woken_by = self._woken_by, None
        if waker is not None:
            waker.done(self)

    def _end(self) -> None:
        self.ended = True
        self._done()

    def _wake_reader(self) -> None:
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    async def next_batch(self) -> Batch:
        """Wait for changes; returns each changed node's newest state, at most one each."""
        self._done()  # what it took last time is sent
        while not self._pending:
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        batch, self._pending = self._pending, {}
        return batch

    @property
    def pending(self) -> int:
        """Nodes with a change not yet taken."""
        return len(self._pending)


class _Waker:
    """Wakes the subscriptions queued in it, in the order they were queued, at most
    ``batch`` at a time: the next once those it woke came back for more (they sent what
    they took) or ``stuck_after`` seconds passed (a stream whose client reads nothing
    waits in its send, and must not hold up every other).

    Bounding what is woken and not yet sent, not only what is woken per turn of the loop:
    a send's completion comes back to the loop later, and 10,000 of them came back after
    the last stream sent, the next role change's request waiting behind them (0.1–0.6 s
    at 5,000 nodes; 9 ms at rest).
    """

    def __init__(self, batch: int, stuck_after: float = STUCK_AFTER) -> None:
        self.batch = batch
        self.stuck_after = stuck_after
        self._queued: deque[Subscription] = deque()
        self._woken: dict[Subscription, float] = {}
        """Woken, not yet back: when each was woken (on the loop's clock)."""
        self._scheduled: asyncio.Handle | None = None

    def add(self, subscription: Subscription) -> None:
        self._queued.append(subscription)
        self._schedule()

    def done(self, subscription: Subscription) -> None:
        if self._woken.pop(subscription, None) is not None:
            self._schedule()

    def _schedule(self) -> None:
        """Wake more in the loop's next turn if there is room (sooner than a look planned
        for when the oldest counts as stuck); if there is none, plan that look, without
        which a batch of streams that never come back would hold up every other for good."""
        if not self._queued:
            return
        loop = asyncio.get_running_loop()
        if len(self._woken) < self.batch:
            if isinstance(self._scheduled, asyncio.TimerHandle):
                self._scheduled.cancel()
                self._scheduled = None
            if self._scheduled is None:
                self._scheduled = loop.call_soon(self._wake_batch)
        elif self._scheduled is None:
            oldest = min(self._woken.values())
            self._scheduled = loop.call_at(oldest + self.stuck_after, self._wake_batch)

    def _wake_batch(self) -> None:
        self._scheduled = None
        now = asyncio.get_running_loop().time()
        for subscription, woken_at in list(self._woken.items()):
            if now - woken_at >= self.stuck_after:
                del self._woken[subscription]
        while self._queued and len(self._woken) < self.batch:
            subscription = self._queued.popleft()
            subscription._waking = False
            # Passed over: a stream that ended, and one whose reader took its changes
            # meanwhile (its own node's change woke it at once), which would not come back.
            if subscription.ended or not subscription.pending:
                continue
            self._woken[subscription] = now
            subscription._wake(self)
        self._schedule()


class NodeCache:
    """Every node record, kept current by one etcd watch of ``/nodes/``."""

    def __init__(
        self, client: EtcdClient, *, wake_batch: int = WAKE_BATCH, stuck_after: float = STUCK_AFTER
    ) -> None:
        self.client = client
        self.nodes: dict[str, state_pb2.NodeRecord] = {}
        self._credentials: dict[str, state_pb2.NodeRecord] = {}
        """Each node's credentials key as stored (records.py): a record's own key changes
        without them, and is joined with the newest."""
        self.revision = 0
        self.version = 0
        """Counts the changes applied: equal versions, equal nodes (``watchevents`` keeps
        one encoded snapshot per version)."""
        self.ready = anyio.Event()
        """Set once the first snapshot is loaded."""
        self._subscriptions: dict[str | None, set[Subscription]] = {}
        """By the node they follow (None: every node), so that a change of one node wakes
        only its own followers and those of every node: each open stream of a node also
        holds a subscription to its own record (the leader's gate, ``standing``)."""
        self._owned: dict[str, set[Subscription]] = {}
        """By their owner: offered a change of their own node before anyone else."""
        self._waker = _Waker(wake_batch, stuck_after)
        """Wakes the followers of every node, a batch at a time."""

    def get(self, node_id: str) -> state_pb2.NodeRecord | None:
        """A node's current record, or None."""
        return self.nodes.get(node_id)

    @contextlib.contextmanager
    def subscribe(
        self, node_id: str | None = None, *, owner: str | None = None
    ) -> Iterator[Subscription]:
        """Changes from now on, of one node or of all, for a stream of ``owner`` (a node ID,
        or None). Take the snapshot (``nodes``) in the same step, before awaiting anything,
        and no change falls between the two."""
        subscription = Subscription(node_id, owner)
        with contextlib.ExitStack() as stack:
            stack.callback(subscription._end)
            stack.enter_context(_member(self._subscriptions, node_id, subscription))
            if owner is not None:
                stack.enter_context(_member(self._owned, owner, subscription))
            yield subscription

    async def run(self) -> None:
        """Load the nodes, then follow every change until cancelled (reloading after a
        gap: ``EtcdClient.mirror_prefix``)."""
        await self.client.mirror_prefix(NODES_PREFIX, load=self._load, apply=self._change)

    async def _load(self, stored: Sequence[KeyValue], revision: int) -> None:
        rests, self._credentials = parts_of((kv.key, kv.value) for kv in stored)
        fresh = joined(rests, self._credentials)
        # Offered at once: a reader sees the whole difference in one batch. (Offers deferred
        # by earlier changes ran while the nodes were read: they come before these.)
        for gone in set(self.nodes) - set(fresh):
            self._apply(gone, None, at_once=True)
        for node_id, record in fresh.items():
            if self.nodes.get(node_id) != record:
                self._apply(node_id, record, at_once=True)
        self.revision = revision
        self.ready.set()

    def _change(self, event: WatchEvent) -> None:
        # A transaction that writes both of a node's keys arrives as two events in one
        # batch, applied before any subscriber runs: none sees one key changed alone.
        node_id, is_credentials = parse_node_key(event.key)
        deleted = event.kind is EventKind.DELETE
        if is_credentials:
            if deleted:
                self._credentials.pop(node_id, None)
            else:
                self._credentials[node_id] = state_pb2.NodeRecord.FromString(event.value)
            current = self.nodes.get(node_id)
            if current is not None:
                self._apply(node_id, join_record(current, self._credentials.get(node_id)))
        elif deleted:
            self._apply(node_id, None)
        else:
            rest = state_pb2.NodeRecord.FromString(event.value)
            self._apply(node_id, join_record(rest, self._credentials.get(node_id)))
        self.revision = max(self.revision, event.revision)

    def _apply(
        self, node_id: str, record: state_pb2.NodeRecord | None, *, at_once: bool = False
    ) -> None:
        self.version += 1
        if record is None:
            self.nodes.pop(node_id, None)
        else:
            self.nodes[node_id] = record
        # The node's own streams now; every other one in the event loop's next turn, after
        # the own streams' tasks have woken (offering 10,000 takes tens of milliseconds).
        for subscription in self._owned.get(node_id, ()):
            subscription._offer(node_id, record)
        if at_once:
            self._offer_all(node_id, record)
        else:
            asyncio.get_running_loop().call_soon(self._offer_all, node_id, record)

    def _offer_all(self, node_id: str, record: state_pb2.NodeRecord | None) -> None:
        """Offer a change to every subscription that wants it but the node's own, which
        ``_apply`` offered it first; the followers of every node are woken through the
        waker (offered again, a stream that had taken it already
        would send the node its record twice, and wake its readers twice).

        Called in order of the changes, one after another in one turn of the loop, before
        any subscriber it wakes runs: the two events of one transaction still arrive
        together, and a subscription made in between, whose snapshot already holds the
        change, is offered the same record again, which changes nothing for its reader."""
        for subscription in self._subscriptions.get(node_id, ()):
            if subscription.owner != node_id:
                subscription._offer(node_id, record)
        for subscription in self._subscriptions.get(None, ()):
            if subscription.owner != node_id:
                subscription._offer(node_id, record, self._waker)

    def statistics(self) -> dict[str, int]:
        """Nodes cached, open subscriptions, and changes waiting in the slowest."""
        subscriptions = [s for followers in self._subscriptions.values() for s in followers]
        return {
            "nodes": len(self.nodes),
            "subscriptions": len(subscriptions),
            "slowest_pending": max((s.pending for s in subscriptions), default=0),
        }


K = TypeVar("K")


@contextlib.contextmanager
def _member(sets: dict[K, set[Subscription]], key: K, subscription: Subscription) -> Iterator[None]:
    """``subscription`` in ``sets[key]`` for the block; the set dropped once empty."""
    members = sets.setdefault(key, set())
    members.add(subscription)
    try:
        yield
    finally:
        members.discard(subscription)
        if not members:
            sets.pop(key, None)
