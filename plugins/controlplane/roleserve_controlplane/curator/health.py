"""Node health from heartbeats, as the leading curator sees it.

::

    state != UP                                     → HEALTH_UNKNOWN
    no heartbeat yet, leader for < timeout          → HEALTH_UNKNOWN   (grace after failover)
    last heartbeat older than timeout (or none)     → HEARTBEAT_TIMEOUT
    otherwise                                       → HEALTHY

    timeout = 3 × the heartbeat interval the curator tells nodes (5 s by default)

Heartbeats are kept in the leader's memory only, as Monogon does: a new leader knows none,
so for one timeout after it takes over every node without a heartbeat to it yet is UNKNOWN
rather than TIMEOUT, which gives every node the chance to reconnect and beat.
"""

from __future__ import annotations

from roleserve_core.clock import Clock
from roleserve_core.proto import common_pb2, management_pb2

__all__ = ["DEFAULT_HEARTBEAT_INTERVAL", "MISSED_BEATS", "Heartbeats"]

DEFAULT_HEARTBEAT_INTERVAL = 5.0
MISSED_BEATS = 3
"""Heartbeat intervals a node may miss before it counts as HEARTBEAT_TIMEOUT."""

Health = management_pb2.Node.Health


class Heartbeats:
    """The last heartbeat of each node, since this curator became leader."""

    def __init__(self, clock: Clock, interval: float = DEFAULT_HEARTBEAT_INTERVAL) -> None:
        self.clock = clock
        self.interval = interval
        self.leader_since = clock.now()
        self._last: dict[str, float] = {}

    @property
    def timeout(self) -> float:
        """Seconds without a heartbeat after which a node has timed out."""
        return MISSED_BEATS * self.interval

    def beat(self, node_id: str) -> None:
        """Record a heartbeat of ``node_id`` now."""
        self._last[node_id] = self.clock.now()

    def since_last(self, node_id: str) -> float | None:
        """Seconds since the last heartbeat of ``node_id``, or None if none arrived."""
        last = self._last.get(node_id)
        return None if last is None else self.clock.now() - last

    def health(
        self, node_id: str, state: common_pb2.NodeState.ValueType
    ) -> management_pb2.Node.Health.ValueType:
        """The ``management.Node.Health`` of a node in ``state``."""
        if state != common_pb2.NODE_STATE_UP:
            return Health.HEALTH_UNKNOWN
        since = self.since_last(node_id)
        if since is None:
            in_grace = self.clock.now() - self.leader_since < self.timeout
            return Health.HEALTH_UNKNOWN if in_grace else Health.HEARTBEAT_TIMEOUT
        return Health.HEARTBEAT_TIMEOUT if since > self.timeout else Health.HEALTHY
