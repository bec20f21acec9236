"""Counters the node keeps about itself, for whoever wants to read them (the metrics plugin).

::

    NodeIntrospection.stats: NodeStats
        ├── heartbeat: HeartbeatStats   round trips (a Histogram), wall time of the last reply
        ├── rpc: RpcStats               gRPC served by the node: handled calls by method and
        │                               code, latency (a Histogram) by method
        ├── etcd: Latencies             requests the node's curator made of etcd: latency (a
        │                               Histogram) by operation (get, put, transaction...)
        └── leader: () -> LeaderSnapshot  set by the controlplane plugin's curator while it
                                        leads: nodes by state and health, open Watch streams,
                                        etcd's last compaction and defragmentations

Plain ints and floats, updated where the thing happens (a heartbeat's reply, a handled
call) at the cost of a dict lookup and an addition; nothing here knows about Prometheus,
so a node without the metrics plugin pays nothing more. Readers take them as they are at
the moment they read (a scrape), on the event loop's thread, like the writers.

What the core already records elsewhere is not copied here: each value's sets and last set
time (``ValueRegistry.entries``), the supervisor tree (``Supervisor.status``), the plugins
(``PluginSet.infos``).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "HEARTBEAT_BUCKETS",
    "RPC_BUCKETS",
    "HeartbeatStats",
    "Histogram",
    "Latencies",
    "LeaderSnapshot",
    "NodeStats",
    "RpcStats",
]

RPC_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""Upper bounds (seconds) of the latency buckets of gRPC calls the node serves."""

HEARTBEAT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
)  # fmt: skip
"""Upper bounds (seconds) of the heartbeat round-trip buckets (a reply is late past 2 s)."""


@dataclass(slots=True)
class Histogram:
    """Observations counted into fixed buckets: Prometheus's histogram, without Prometheus.

    ``counts[i]`` counts observations ``<= bounds[i]`` and above the bound before it (not
    cumulative); ``counts[-1]`` those above every bound.
    """

    bounds: tuple[float, ...]
    counts: list[int] = field(init=False)
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count ``value`` (O(log buckets))."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= it)`` per bucket, ``+inf`` last: Prometheus's
        ``le`` buckets."""
        total, result = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            result.append((bound, total))
        return result


@dataclass(slots=True)
class Latencies:
    """A ``Histogram`` per key (a method, an operation), made on the key's first
    observation. The keys must be bounded: names from code, never from requests."""

    bounds: tuple[float, ...]
    by_key: dict[str, Histogram] = field(default_factory=dict)

    def observe(self, key: str, seconds: float) -> None:
        """Count one observation of ``key``."""
        histogram = self.by_key.get(key)
        if histogram is None:
            histogram = self.by_key[key] = Histogram(self.bounds)
        histogram.observe(seconds)


@dataclass(slots=True)
class HeartbeatStats:
    """What the ``heartbeat`` worker saw of the curator's replies."""

    round_trip: Histogram = field(default_factory=lambda: Histogram(HEARTBEAT_BUCKETS))
    """Seconds from sending a heartbeat to its reply."""
    last_reply: float | None = None
    """Wall-clock time (``time.time()``) of the latest reply; None before the first."""

    def replied(self, round_trip: float) -> None:
        """Record a reply that took ``round_trip`` seconds."""
        self.round_trip.observe(round_trip)
        self.last_reply = time.time()


@dataclass(slots=True)
class RpcStats:
    """gRPC calls the node's servers handled (``create_server(stats=...)``).

    Keys are bounded: the methods are those of the services the node serves, the codes
    gRPC's seventeen.
    """

    handled: dict[tuple[str, str], int] = field(default_factory=dict)
    """``(method, code name)`` → calls that ended with that code."""
    latency: Latencies = field(default_factory=lambda: Latencies(RPC_BUCKETS))
    """Method → seconds from its start to its end (a stream: its whole life)."""

    def record(self, method: str, code: str, seconds: float) -> None:
        """Count one finished call."""
        key = (method, code)
        self.handled[key] = self.handled.get(key, 0) + 1
        self.latency.observe(method, seconds)


@dataclass(frozen=True, slots=True)
class LeaderSnapshot:
    """What the leading curator knows of the cluster, taken when asked (at a scrape)."""

    nodes: Mapping[tuple[str, str], int]
    """``(state, health)`` names as ``ctl nodes`` shows them (``UP``, ``HEALTHY``;
    ``NEW``, ``UNKNOWN``) → how many nodes."""
    watch_streams: int
    """Open ``Curator.Watch`` streams."""
    compacted_revision: int = 0
    """The revision the curator last compacted etcd's history to; 0: not since it leads."""
    compacted_at: float = 0.0
    """Unix time of that compaction; 0.0: none."""
    defragmentations: int = 0
    """etcd members the curator defragmented since it leads."""


@dataclass(slots=True)
class NodeStats:
    """Everything of ``stats`` one node keeps (see the module docstring)."""

    heartbeat: HeartbeatStats = field(default_factory=HeartbeatStats)
    rpc: RpcStats = field(default_factory=RpcStats)
    etcd: Latencies = field(default_factory=lambda: Latencies(RPC_BUCKETS))
    """Seconds of each etcd request of the node's curator, by operation (``EtcdClient``'s
    ``observe``); empty on a node without a curator."""
    leader: Callable[[], LeaderSnapshot] | None = None
    """The leading curator's snapshot, while this node's curator leads; None otherwise."""
