"""Watch events encoded once (``curator.watchevents``): the bytes are the events the
streams used to build one by one, and streams starting on the same nodes share them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from roleserve_controlplane.consensus import EtcdClient
from roleserve_controlplane.curator import NodeCache, watchevents
from roleserve_controlplane.curator.leader import api_node
from roleserve_controlplane.curator.state import node_key
from roleserve_controlplane.curator.watchevents import WatchEncoder, encoded
from roleserve_controlplane.proto import state_pb2
from roleserve_core import common_pb2, curator_pb2

pytestmark = pytest.mark.anyio

LAST = curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED


def _record(node_id: str, generation: int = 0) -> state_pb2.NodeRecord:
    record = state_pb2.NodeRecord(id=node_id, state=common_pb2.NODE_STATE_UP)
    record.status.external_address = f"192.0.2.{generation}"
    record.certificate = b"not for nodes' eyes"
    return record


@pytest.fixture
async def cache(etcd_client: EtcdClient) -> AsyncIterator[NodeCache]:
    """A running node cache of node-b and node-a."""
    for record in (_record("node-b"), _record("node-a")):
        await etcd_client.put(node_key(record.id), record.SerializeToString())
    cache = NodeCache(etcd_client)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(cache.run)
        with anyio.fail_after(10):
            await cache.ready.wait()
        yield cache
        tasks.cancel_scope.cancel()


def _parsed(events: list[bytes]) -> list[curator_pb2.WatchEvent]:
    return [curator_pb2.WatchEvent.FromString(event) for event in events]


async def test_the_snapshot_is_every_node_by_id_then_the_backlog_marker(
    cache: NodeCache,
) -> None:
    events = _parsed(WatchEncoder(cache).snapshot(None))
    expected = [api_node(_record("node-a")), api_node(_record("node-b"))]
    assert events == [curator_pb2.WatchEvent(nodes=expected, progress=LAST)]


async def test_streams_starting_on_the_same_nodes_share_one_snapshot(
    cache: NodeCache, etcd_client: EtcdClient
) -> None:
    encoder = WatchEncoder(cache)
    first = encoder.snapshot(None)
    assert encoder.snapshot(None) is first
    changed = _record("node-a", 1)
    with cache.subscribe("node-a") as subscription, anyio.fail_after(10):
        await etcd_client.put(node_key("node-a"), changed.SerializeToString())
        await subscription.next_batch()
    fresh = encoder.snapshot(None)
    assert fresh is not first
    assert _parsed(fresh)[0].nodes[0] == api_node(changed)


async def test_a_large_snapshot_comes_in_chunks_with_the_marker_on_the_last(
    cache: NodeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watchevents, "CHUNK_BYTES", 1)  # a chunk ends past one byte
    events = _parsed(WatchEncoder(cache).snapshot(None))
    assert [[node.id for node in event.nodes] for event in events] == [["node-a"], ["node-b"]]
    assert [event.progress for event in events] == [
        curator_pb2.WatchEvent.PROGRESS_UNSPECIFIED,
        LAST,
    ]


async def test_one_nodes_snapshot(cache: NodeCache) -> None:
    encoder = WatchEncoder(cache)
    mine = curator_pb2.WatchEvent(nodes=[api_node(_record("node-b"))], progress=LAST)
    assert _parsed(encoder.snapshot("node-b")) == [mine]
    assert _parsed(encoder.snapshot("node-x")) == [curator_pb2.WatchEvent(progress=LAST)]


async def test_a_change_is_its_nodes_by_id_and_its_tombstones(cache: NodeCache) -> None:
    encoder = WatchEncoder(cache)
    a, c = _record("node-a", 1), _record("node-c", 2)
    event = curator_pb2.WatchEvent.FromString(
        encoder.change({"node-c": c, "node-b": None, "node-a": a})
    )
    assert event == curator_pb2.WatchEvent(
        nodes=[api_node(a), api_node(c)],
        node_tombstones=[curator_pb2.WatchEvent.NodeTombstone(node_id="node-b")],
    )
    assert encoder.entry(a) is encoder.entry(a)  # encoded once per record


def test_the_serializer_passes_encoded_events_and_encodes_messages() -> None:
    event = curator_pb2.WatchEvent(progress=LAST)
    assert encoded(event.SerializeToString()) == encoded(event) == event.SerializeToString()
