"""This node's own record, taken from ``cluster_nodes``: what rolefetch and statuspush follow.

Each of the two used to hold a ``Watch(NodeInCluster)`` of this node on the leader, beside
the one ``Watch(NodesInCluster)`` that ``nodewatch`` keeps for ``cluster_nodes``, which
carries the same record: three streams per node on the leading curator where one does
(30,000 at 10,000 nodes). Both now declare ``cluster_nodes`` in their ``reads`` (so
``nodewatch`` keeps its Watch while they run) and take the node's record from each view::

    Watch(NodesInCluster) ─▶ nodewatch ─▶ cluster_nodes ─┬─▶ follow_own_record ─▶ rolefetch
                                                          ├─▶ follow_own_record ─▶ statuspush
                                                          └─▶ the plugins' readers

A view shares the records of the nodes its last event did not carry (``NodeWatchFold``), so
"this node's record changed" is an identity test: O(1) per view, whatever the cluster's
size, so a change of another node costs the two workers one lookup each. After a new
leader, the fresh backlog's view holds new records, and the readers look at theirs again,
as they did with a fresh stream of their own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from roleserve_core.clusternodes import CLUSTER_NODES
from roleserve_core.proto import curator_pb2
from roleserve_core.registry import PluginValues

__all__ = ["follow_own_record"]

_NOTHING_YET = curator_pb2.Node()
"""Stands for "no view yet": never a record of a view (records are the fold's own)."""


async def follow_own_record(
    values: PluginValues, node_id: str
) -> AsyncIterator[curator_pb2.Node | None]:
    """The record of ``node_id`` in each whole view of ``cluster_nodes`` where it is not
    the one yielded last (None while the view has no such node): the first whole view's
    always, then each record the curator sent anew.

    Views left by a Watch nobody keeps (``backlogged`` False) are skipped. The worker using
    it declares ``reads=(CLUSTER_NODES, ...)``, or nobody keeps the value.
    """
    last: curator_pb2.Node | None = _NOTHING_YET
    with values.watch(CLUSTER_NODES) as views:
        async for view in views:
            if not view.backlogged:
                continue
            record = view.get(node_id)
            if record is last:
                continue
            last = record
            yield record
