"""The leader's gate for nodes: a decommissioned node's certificate opens nothing.

::

    every authenticated call of a node (Watch, UpdateNodeStatus, Heartbeat, ...)
        └─ AuthorizationInterceptor ─▶ DecommissionedGate.refusal(node): its record in the
           node cache DECOMMISSIONED? ──▶ PERMISSION_DENIED "node X is decommissioned: ..."
    an open response stream of that node
        └─ DecommissionedGate.wait_refusal(node): a subscription to its record in the cache;
           the stream ends with the same status once the record says DECOMMISSIONED

A node certificate cannot be taken back (there is no revocation, and it is valid for
years), so the leader checks the node's record on every call instead. The cache is the
source: it is in memory, follows etcd within moments, and already wakes subscribers on
every change, so the check costs a dictionary lookup. A node without a record is let
through here: the handlers answer it NOT_FOUND as before.
"""

from __future__ import annotations

from roleserve_controlplane.curator.cache import NodeCache
from roleserve_controlplane.proto import state_pb2
from roleserve_core import common_pb2

__all__ = ["DecommissionedGate", "decommissioned_refusal"]


def decommissioned_refusal(record: state_pb2.NodeRecord | None) -> str | None:
    """The refusal of a node whose record this is, if it is decommissioned."""
    if record is None or record.state != common_pb2.NODE_STATE_DECOMMISSIONED:
        return None
    return (
        f"node {record.id} is decommissioned: the cluster refuses its certificate for good; "
        "remove its data directory (register the machine anew to use it again)"
    )


class DecommissionedGate:
    """A ``roleserve_core.rpc.NodeGate`` over the leader's node cache."""

    def __init__(self, cache: NodeCache) -> None:
        self.cache = cache

    async def refusal(self, node_id: str) -> str | None:
        """Why ``node_id`` may not call (once the cache has loaded); None if it may."""
        await self.cache.ready.wait()
        return decommissioned_refusal(self.cache.get(node_id))

    async def wait_refusal(self, node_id: str) -> str:
        """Return the refusal once ``node_id``'s record says it is decommissioned."""
        await self.cache.ready.wait()
        with self.cache.subscribe(node_id) as subscription:
            while (reason := decommissioned_refusal(self.cache.get(node_id))) is None:
                await subscription.next_batch()
        return reason
