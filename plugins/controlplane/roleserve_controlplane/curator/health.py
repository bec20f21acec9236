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

One process per node identity::

    first heartbeat of a stream ─▶ connect(node, peer, instance)
        no holder, or the holder is this process, or it beat longer than a timeout ago
            ─▶ this stream holds the node
        another live process holds it ─▶ refused; remembered as the node's conflict
    stream ends ─▶ disconnect: the node is free again

Two processes with one identity (a copied data directory) would otherwise take turns:
each heartbeat keeps the node HEALTHY and each status report replaces the other's address.
The first keeps the node; the second is refused, and ``ctl nodes`` shows the conflict
while the second keeps trying (within one timeout of its last attempt). A process is told
apart by the instance ID it sends, not by its peer address alone: a reconnecting process
comes from another port, and every process on one machine may come from 127.0.0.1. A
holder silent for a timeout no longer counts, so a node whose machine died without closing
its stream is not locked out when it comes back.
"""

from __future__ import annotations

from dataclasses import dataclass

from roleserve_core import Clock, common_pb2, management_pb2

__all__ = ["DEFAULT_HEARTBEAT_INTERVAL", "MISSED_BEATS", "Connection", "Heartbeats"]

DEFAULT_HEARTBEAT_INTERVAL = 5.0
MISSED_BEATS = 3
"""Heartbeat intervals a node may miss before it counts as HEARTBEAT_TIMEOUT."""

Health = management_pb2.Node.Health


@dataclass(frozen=True)
class Connection:
    """One node process's heartbeat stream: where it comes from, and the process's ID."""

    peer: str
    """The gRPC peer address, for messages (``127.0.0.1:43210``)."""
    instance: str
    """The process's random instance ID; empty from a process that sends none."""

    def same_process(self, other: Connection) -> bool:
        """Whether ``other`` comes from this process (by instance ID, else by peer)."""
        if self.instance and other.instance:
            return self.instance == other.instance
        return self.peer == other.peer


@dataclass(frozen=True)
class _Refusal:
    connection: Connection
    at: float


class Heartbeats:
    """The last heartbeat of each node, since this curator became leader."""

    def __init__(self, clock: Clock, interval: float = DEFAULT_HEARTBEAT_INTERVAL) -> None:
        self.clock = clock
        self.interval = interval
        self.leader_since = clock.now()
        self._last: dict[str, float] = {}
        self._holders: dict[str, tuple[Connection, float]] = {}
        """Node ID → the connection holding its heartbeat stream, and since when."""
        self._refused: dict[str, _Refusal] = {}
        """Node ID → the latest connection refused because another one holds it."""

    @property
    def timeout(self) -> float:
        """Seconds without a heartbeat after which a node has timed out."""
        return MISSED_BEATS * self.interval

    def beat(self, node_id: str) -> None:
        """Record a heartbeat of ``node_id`` now."""
        self._last[node_id] = self.clock.now()

    def connect(self, node_id: str, connection: Connection) -> Connection | None:
        """Let ``connection`` hold the heartbeat stream of ``node_id``.

        :returns: None if it holds it now; else the live connection of another process
            that holds it (the refusal is kept for ``conflict``).
        """
        holder = self.holder(node_id)
        if holder is not None and not holder.same_process(connection):
            self._refused[node_id] = _Refusal(connection, self.clock.now())
            return holder
        self._holders[node_id] = (connection, self.clock.now())
        return None

    def disconnect(self, node_id: str, connection: Connection) -> None:
        """The stream of ``connection`` ended; the node is free unless another holds it."""
        held = self._holders.get(node_id)
        # By identity: the same process may have opened a new stream, equal to this one,
        # before this one's end was seen; that one holds the node now.
        if held is not None and held[0] is connection:
            del self._holders[node_id]

    def holder(self, node_id: str) -> Connection | None:
        """The connection holding the node's heartbeat stream, if it was heard from within
        one timeout (connected or beat)."""
        held = self._holders.get(node_id)
        if held is None:
            return None
        connection, since = held
        heard = max(since, self._last.get(node_id, since))
        return connection if self.clock.now() - heard <= self.timeout else None

    def refuse_other(self, node_id: str, connection: Connection) -> Connection | None:
        """For a report from ``connection`` (a status): the live holder of another process
        that it must not overwrite, if any (the refusal is kept for ``conflict``)."""
        holder = self.holder(node_id)
        if holder is None or holder.same_process(connection):
            return None
        self._refused[node_id] = _Refusal(connection, self.clock.now())
        return holder

    def conflict(self, node_id: str) -> str:
        """What operators see while a second process with the node's identity is being
        refused (it tried within one timeout); empty otherwise."""
        refused = self._refused.get(node_id)
        holder = self.holder(node_id)
        if refused is None or holder is None:
            return ""
        age = self.clock.now() - refused.at
        if age > self.timeout:
            return ""
        return (
            f"connected from {holder.peer}; a second process from {refused.connection.peer} "
            f"was refused {age:.0f}s ago: two processes share this node's identity"
        )

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
