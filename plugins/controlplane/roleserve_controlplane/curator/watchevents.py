"""``Curator.Watch`` events, encoded once for every stream that sends them.

::

    a node's record ──api_node, encoded once per record──▶ its entry: WatchEvent{nodes: [it]}
    a change event  = the batch's entries (and tombstones) joined, by node ID
    a snapshot      = every node's entry joined, in chunks; built once per cache version
                      and shared by every stream that starts on that version
    the Watch handler yields these bytes; its serializer sends them as they are

A protobuf message is its fields' encodings one after another, and a repeated field may be
written as separate entries: the bytes of ``WatchEvent{nodes: [a]}`` followed by those of
``WatchEvent{nodes: [b]}`` are the bytes of ``WatchEvent{nodes: [a, b]}``. So one change of
a node watched by every node is encoded once, not once per stream (10,000 ``api_node``
copies and serialisations at 10,000 nodes), and a snapshot is built once per change of the
cluster, not once per stream that starts (at a failover, every node starts one).
"""

from __future__ import annotations

from collections.abc import Mapping

from roleserve_controlplane.curator.cache import Batch, NodeCache
from roleserve_controlplane.curator.leader import api_node
from roleserve_controlplane.proto import state_pb2
from roleserve_core import curator_pb2

__all__ = ["CHUNK_BYTES", "WatchEncoder", "encoded"]

CHUNK_BYTES = 2 * 1024 * 1024
"""A snapshot event is sent once it passes this size: half of gRPC's 4 MiB message limit."""

_LAST_BACKLOGGED = curator_pb2.WatchEvent(
    progress=curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED
).SerializeToString()


def encoded(event: bytes | curator_pb2.WatchEvent) -> bytes:
    """The Watch method's response serializer: events encoded here pass as they are."""
    return event if isinstance(event, bytes) else event.SerializeToString()


def _tombstone(node_id: str) -> bytes:
    return curator_pb2.WatchEvent(
        node_tombstones=[curator_pb2.WatchEvent.NodeTombstone(node_id=node_id)]
    ).SerializeToString()


class WatchEncoder:
    """Each node's entry, encoded once per record, and the snapshots joined from them."""

    def __init__(self, cache: NodeCache) -> None:
        self.cache = cache
        self._entries: dict[str, tuple[state_pb2.NodeRecord, bytes]] = {}
        """Node ID → the record last encoded (compared by identity: the cache hands the
        same object to every subscription) and its entry."""
        self._snapshot: tuple[int, list[bytes]] | None = None
        """The cache's version, and every node's snapshot at it."""

    def entry(self, record: state_pb2.NodeRecord) -> bytes:
        """``WatchEvent{nodes: [the node as nodes see it]}``, encoded."""
        known = self._entries.get(record.id)
        if known is not None and known[0] is record:
            return known[1]
        entry = curator_pb2.WatchEvent(nodes=[api_node(record)]).SerializeToString()
        self._entries[record.id] = (record, entry)
        return entry

    def change(self, batch: Batch) -> bytes:
        """One event of a subscription's batch: each changed node, or its tombstone."""
        parts = []
        for node_id, record in sorted(batch.items()):
            if record is None:
                self._entries.pop(node_id, None)
                parts.append(_tombstone(node_id))
            else:
                parts.append(self.entry(record))
        return b"".join(parts)

    def snapshot(self, node_id: str | None) -> list[bytes]:
        """The cache's nodes now (one node's, or every node's), in events of at most about
        ``CHUNK_BYTES``; the last one marks the end of the backlog."""
        if node_id is not None:
            record = self.cache.get(node_id)
            return [(self.entry(record) if record is not None else b"") + _LAST_BACKLOGGED]
        cached = self._snapshot
        if cached is None or cached[0] != self.cache.version:
            cached = self.cache.version, self._chunks(self.cache.nodes)
            self._snapshot = cached
        return cached[1]

    def _chunks(self, nodes: Mapping[str, state_pb2.NodeRecord]) -> list[bytes]:
        chunks: list[list[bytes]] = [[]]
        size = 0
        for node_id in sorted(nodes):
            if size > CHUNK_BYTES:
                chunks.append([])
                size = 0
            entry = self.entry(nodes[node_id])
            chunks[-1].append(entry)
            size += len(entry)
        chunks[-1].append(_LAST_BACKLOGGED)
        return [b"".join(chunk) for chunk in chunks]
