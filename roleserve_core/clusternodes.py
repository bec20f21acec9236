"""Every node of the cluster as one shared value (``cluster_nodes``), and how to follow it.

The curator's ``Watch(NodesInCluster)`` sends a backlog (every node, the last event marked
``PROGRESS_LAST_BACKLOGGED``) and then each change: changed nodes whole, removed ones as
tombstones. Folding that stream into a map is the same few lines wherever it is done, so it
is done here once (``NodeWatchFold``), and one core worker (``nodewatch``) keeps the result
as the value ``cluster_nodes`` for every plugin of the node (its key, ``CLUSTER_NODES``, is
declared here, beside its type and the helpers that follow it)::

    Watch(NodesInCluster) ──events──▶ NodeWatchFold ──after the backlog, once per event──▶
        cluster_nodes: ClusterNodes { node ID → curator_pb2.Node, backlogged }
            │
            ├─ a reader that wants the whole map: watch it, skip views not backlogged
            └─ a reader that wants the changes: follow_changes() / node_changes(old, new)
                 → NodeChanges(added, updated, removed), filtered, with its own equality

The records are the curator's ``curator_pb2.Node`` messages, shared by every reader: treat
them as read-only (copy one with ``CopyFrom`` before changing it).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import (
    AsyncIterator,
    Callable,
    ItemsView,
    Iterator,
    KeysView,
    Mapping,
    ValuesView,
)
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from roleserve_core._moved import moved_names
from roleserve_core.proto import curator_pb2
from roleserve_core.registry import PluginValues, ValueKey

__all__ = [
    "CLUSTER_NODES",
    "ClusterNodes",
    "NodeChanges",
    "NodeWatchFold",
    "follow_changes",
    "node_address",
    "node_changes",
]

Node = curator_pb2.Node
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NodeFilter = Callable[[Node], bool]
"""``include=``: whether a node counts at all (a node that stops counting is removed)."""
NodeEquality = Callable[[Node, Node], bool]
"""``same=``: whether two records of one node are equal for the reader (else: updated)."""


class ClusterNodes(Mapping[str, Node]):
    """An immutable map of node ID → node record, as the leading curator knows them.

    ``backlogged`` is True while the core's ``nodewatch`` follows a Watch whose whole
    backlog this view holds. The view it leaves when it stops (no running worker reads the
    value any more) keeps the nodes but says False: a reader that starts later waits for
    the next view that says True instead of trusting a map nobody keeps current.
    """

    __slots__ = ("_nodes", "backlogged")

    def __init__(self, nodes: Mapping[str, Node] | None = None, *, backlogged: bool) -> None:
        self._nodes: Mapping[str, Node] = MappingProxyType(dict(nodes or {}))
        self.backlogged = backlogged

    def __getitem__(self, node_id: str) -> Node:
        return self._nodes[node_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    # The mapping's own views and lookups, not Mapping's generic ones (which go through
    # __getitem__ and a KeyError per miss): node_changes() walks 10,000-node views per event.
    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def get(self, node_id: str, default: Node | None = None) -> Node | None:  # type: ignore[override]
        return self._nodes.get(node_id, default)

    def keys(self) -> KeysView[str]:
        return self._nodes.keys()

    def items(self) -> ItemsView[str, Node]:
        return self._nodes.items()

    def values(self) -> ValuesView[Node]:
        return self._nodes.values()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterNodes):
            return NotImplemented
        return self.backlogged == other.backlogged and dict(self._nodes) == dict(other._nodes)

    __hash__ = None  # type: ignore[assignment]  # equal views may differ in identity only

    def stale(self) -> ClusterNodes:
        """The same nodes, marked as no longer followed (``backlogged`` False)."""
        return ClusterNodes(self._nodes, backlogged=False)

    def __repr__(self) -> str:
        shown = ", ".join(sorted(self._nodes)[:5])
        more = f", … {len(self) - 5} more" if len(self) > 5 else ""
        return f"ClusterNodes({len(self)} nodes: {shown}{more}; backlogged={self.backlogged})"


CLUSTER_NODES: ValueKey[ClusterNodes] = ValueKey(
    "cluster_nodes",
    ClusterNodes,
    "Every node of the cluster (node ID -> curator record), from one Watch of the leader; "
    "set after its backlog, once per change; kept only while a running worker reads it.",
)
"""The key, declared beside its type and the readers' helpers below, which follow it; one
of ``roleserve_core.values``' keys too (``SHARED_KEYS``), owned by the core."""


class NodeWatchFold:
    """The state of one ``Watch(NodesInCluster)`` stream: every node its events have shown.

    Feed it each event in order (``apply``); ``view()`` is the map as an immutable value.
    One fold per stream: a new stream starts from nothing, since its backlog is whole.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.backlogged = False
        """Whether the event marked as the last of the backlog has been applied."""

    def apply(self, event: curator_pb2.WatchEvent) -> bool:
        """Apply one event; True if the map is now whole (the backlog read) and this
        event is the one that completed it or changed it."""
        for node in event.nodes:
            self.nodes[node.id] = node
        for tombstone in event.node_tombstones:
            self.nodes.pop(tombstone.node_id, None)
        completed = (
            not self.backlogged
            and event.progress == curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED
        )
        self.backlogged = self.backlogged or completed
        changed = bool(event.nodes or event.node_tombstones)
        return completed or (self.backlogged and changed)

    def view(self) -> ClusterNodes:
        """The nodes shown so far, as a value."""
        return ClusterNodes(self.nodes, backlogged=self.backlogged)


@dataclass(frozen=True, slots=True)
class NodeChanges:
    """What changed between two views of the cluster's nodes, each part sorted by node ID."""

    added: tuple[Node, ...]
    updated: tuple[Node, ...]
    """The new records of nodes in both views whose records differ (by ``same``)."""
    removed: tuple[str, ...]
    """IDs of nodes that left the view, or no longer pass ``include``."""

    def __bool__(self) -> bool:
        return bool(self.added or self.updated or self.removed)


def _equal(old: Node, new: Node) -> bool:
    return old == new


def node_changes(
    old: Mapping[str, Node],
    new: Mapping[str, Node],
    *,
    include: NodeFilter | None = None,
    same: NodeEquality = _equal,
) -> NodeChanges:
    """The changes from ``old`` to ``new``, counting only nodes ``include`` accepts.

    ``same(old_record, new_record)`` decides whether a node changed: the metrics discovery,
    say, compares only the address and roles, so a heartbeat-only change is no change.
    """
    before = _included(old, include)
    after = _included(new, include)
    added = sorted(node_id for node_id in after if node_id not in before)
    updated = sorted(
        node_id
        for node_id, record in after.items()
        if (previous := before.get(node_id)) is not None
        and previous is not record  # a view shares the records of nodes that did not change
        and not same(previous, record)
    )
    removed = sorted(node_id for node_id in before if node_id not in after)
    return NodeChanges(
        tuple(after[node_id] for node_id in added),
        tuple(after[node_id] for node_id in updated),
        tuple(removed),
    )


def _included(nodes: Mapping[str, Node], include: NodeFilter | None) -> Mapping[str, Node]:
    if include is None:
        return nodes
    return {node_id: node for node_id, node in nodes.items() if include(node)}


async def follow_changes(
    values: PluginValues,
    *,
    include: NodeFilter | None = None,
    same: NodeEquality = _equal,
) -> AsyncIterator[tuple[ClusterNodes, NodeChanges]]:
    """Each whole view of ``cluster_nodes`` and what changed since the last one yielded.

    The first yield has every (included) node as added, even when that is none: the
    reader then knows the cluster as it is. Views that change nothing the reader counts
    are skipped. The worker using it must declare ``reads=(CLUSTER_NODES,)``, or nobody
    keeps the value.
    """
    previous: Mapping[str, Node] | None = None
    with values.watch(CLUSTER_NODES) as views:
        async for view in views:
            if not view.backlogged:
                continue
            found = node_changes(previous or {}, view, include=include, same=same)
            if found or previous is None:
                yield view, found
            previous = view


def node_address(node: Node) -> IPAddress | None:
    """The node's external address from its status, or None if it has none.

    :raises ValueError: if the status holds an address that does not parse.
    """
    if not node.status.external_address:
        return None
    return _parse_address(node.status.external_address)


@functools.lru_cache(maxsize=1 << 16)
def _parse_address(text: str) -> IPAddress:
    """``ipaddress.ip_address``, remembered: readers parse every node's address on every
    view, and parsing costs ~7 µs (70 ms a view at 10,000 nodes), a lookup ~0.1 µs."""
    return ipaddress.ip_address(text)


if TYPE_CHECKING:
    changes = node_changes
else:
    # Plugin API 1's name of node_changes, renamed to read on its own at the top level.
    __getattr__ = moved_names(__name__, {"changes": "roleserve_core:node_changes"}, api=1)
