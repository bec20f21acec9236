"""The ``core`` exporter: the node's own metrics, read at scrape time from what the core keeps.

::

    NodeIntrospection ──▶ CoreCollector.collect() (at each scrape) ──▶ metric families
      ├── supervisor.status()      roleserve_runnable_state{dn,state}, _restarts_total{dn},
      │                            _failures_total{dn}, _crash_looping{dn}
      ├── registry.entries()       roleserve_value_sets_total{key}, _watchers{key},
      │                            _last_set_age_seconds{key}
      ├── curator_connection       roleserve_curator_connections_total,
      │                            roleserve_curator_connected_seconds
      ├── stats.heartbeat          roleserve_heartbeat_round_trip_seconds (histogram),
      │                            roleserve_heartbeat_last_reply_age_seconds
      ├── stats.rpc                roleserve_grpc_server_handled_total{method,code},
      │                            roleserve_grpc_server_handling_seconds{method} (histogram)
      ├── stats.etcd (a curator)   roleserve_curator_etcd_request_seconds{operation}
      │                            (histogram)
      ├── stats.leader (leading)   roleserve_curator_nodes{state,health},
      │                            roleserve_curator_watch_streams,
      │                            roleserve_curator_etcd_compacted_revision,
      │                            roleserve_curator_etcd_last_compaction_timestamp_seconds,
      │                            roleserve_curator_etcd_defragmentations_total
      ├── plugins.infos()          roleserve_plugin_info{name,version,state},
      │                            roleserve_plugin_hook_failures_total{name,hook}
      └── core_version()           roleserve_build_info{version,python}

Nothing is kept between scrapes and nothing runs between them: a node pays for its metrics
only when they are scraped (and not at all without this plugin). The core's own records are
the counters (see ``roleserve_core.stats``); this module only names and shapes them.

Every label set is bounded: DNs by the supervision tree, keys by the declared values,
methods by the services served, codes by gRPC, plugins by those installed. No node ID is a
label: each node is its own target, and Prometheus adds ``instance``.

Counters that the core resets (a runnable's restarts when its parent restarts it) are
counter resets to Prometheus, which ``rate()`` handles.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from roleserve_core import CURATOR_CONNECTION, NodeIntrospection, State, core_version
from roleserve_core.stats import Histogram, Latencies, LeaderSnapshot

__all__ = ["STATES", "CoreCollector", "core_registry"]

STATES: tuple[str, ...] = tuple(state.value for state in State)
"""Every runnable state: ``roleserve_runnable_state`` has one series per DN and state,
1 for the state it is in, 0 for the others, so a state's count is a plain ``sum``."""


class CoreCollector(Collector):
    """The node's own metrics (see the module docstring), from ``introspection``."""

    def __init__(self, introspection: NodeIntrospection) -> None:
        self.introspection = introspection
        self.build = (core_version(), platform.python_version())
        """The labels of ``roleserve_build_info``: fixed for the process's life."""

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        yield from _build_info(self.build)
        yield from self._supervisor()
        yield from self._values(now)
        yield from self._heartbeat(now)
        yield from self._rpc()
        yield from self._etcd()
        yield from self._leader()
        yield from self._plugins()

    def describe(self) -> Iterable[Metric]:
        return ()  # families depend on the node's state: nothing to check at registration

    def _supervisor(self) -> Iterator[Metric]:
        supervisor = self.introspection.supervisor
        if not supervisor.statistics().is_set:
            return
        statuses = supervisor.get_nowait().status()
        state = GaugeMetricFamily(
            "roleserve_runnable_state",
            "1 for the state each runnable is in, 0 for the others.",
            labels=("dn", "state"),
        )
        restarts = CounterMetricFamily(
            "roleserve_runnable_restarts",
            "Times the runnable was restarted since its parent last started it.",
            labels=("dn",),
        )
        failures = CounterMetricFamily(
            "roleserve_runnable_failures",
            "Times the runnable died since its parent last started it.",
            labels=("dn",),
        )
        looping = GaugeMetricFamily(
            "roleserve_runnable_crash_looping",
            "1 if the runnable died too often within the crash-loop window.",
            labels=("dn",),
        )
        for status in statuses:
            dn, current = status.dn, status.state.value
            for name in STATES:
                state.add_metric((dn, name), 1.0 if name == current else 0.0)
            restarts.add_metric((dn,), status.restarts)
            failures.add_metric((dn,), status.failures)
            looping.add_metric((dn,), 1.0 if status.crash_looping else 0.0)
        yield from (state, restarts, failures, looping)

    def _values(self, now: float) -> Iterator[Metric]:
        sets = CounterMetricFamily(
            "roleserve_value_sets", "Times each node value was set.", labels=("key",)
        )
        watchers = GaugeMetricFamily(
            "roleserve_value_watchers", "Open watchers of each node value.", labels=("key",)
        )
        age = GaugeMetricFamily(
            "roleserve_value_last_set_age_seconds",
            "Seconds since each node value was last set (values set at least once).",
            labels=("key",),
        )
        connections = CounterMetricFamily(
            "roleserve_curator_connections",
            "Connections the node made to a leading curator (each leader change, each "
            "reconnection after an unresponsive leader).",
        )
        connected = GaugeMetricFamily(
            "roleserve_curator_connected_seconds",
            "Seconds the node has been on its current connection to the leading curator.",
        )
        for info in self.introspection.registry.entries():
            sets.add_metric((info.name,), info.sets)
            watchers.add_metric((info.name,), info.watchers)
            if info.last_changed is not None:
                age.add_metric((info.name,), max(0.0, now - info.last_changed))
            if info.name == CURATOR_CONNECTION.name:
                connections.add_metric((), info.sets)
                if info.last_changed is not None:
                    connected.add_metric((), max(0.0, now - info.last_changed))
        yield from (sets, watchers, age, connections)
        if connected.samples:
            yield connected

    def _heartbeat(self, now: float) -> Iterator[Metric]:
        heartbeat = self.introspection.stats.heartbeat
        yield _histogram(
            "roleserve_heartbeat_round_trip_seconds",
            "Seconds from a heartbeat to the leading curator's reply.",
            heartbeat.round_trip,
        )
        if heartbeat.last_reply is not None:
            yield GaugeMetricFamily(
                "roleserve_heartbeat_last_reply_age_seconds",
                "Seconds since the leading curator last answered a heartbeat.",
                value=max(0.0, now - heartbeat.last_reply),
            )

    def _rpc(self) -> Iterator[Metric]:
        rpc = self.introspection.stats.rpc
        handled = CounterMetricFamily(
            "roleserve_grpc_server_handled",
            "gRPC calls the node's servers finished, by method and status code.",
            labels=("method", "code"),
        )
        for (method, code), count in sorted(rpc.handled.items()):
            handled.add_metric((method, code), count)
        yield handled
        yield _histograms(
            "roleserve_grpc_server_handling_seconds",
            "Seconds from a gRPC call's start to its end (a stream: its whole life).",
            "method",
            rpc.latency,
        )

    def _etcd(self) -> Iterator[Metric]:
        etcd = self.introspection.stats.etcd
        if etcd.by_key:  # a node that runs a curator
            yield _histograms(
                "roleserve_curator_etcd_request_seconds",
                "Seconds of the curator's etcd requests, failed ones too, by operation.",
                "operation",
                etcd,
            )

    def _leader(self) -> Iterator[Metric]:
        offer = self.introspection.stats.leader
        if offer is None:
            return  # not the leading curator: none of its series
        snapshot = offer()
        nodes = GaugeMetricFamily(
            "roleserve_curator_nodes",
            "Nodes of the cluster by state and health, as the leading curator sees them.",
            labels=("state", "health"),
        )
        for (state, health), count in sorted(snapshot.nodes.items()):
            nodes.add_metric((state, health), count)
        yield nodes
        yield GaugeMetricFamily(
            "roleserve_curator_watch_streams",
            "Curator.Watch streams open on the leading curator.",
            value=snapshot.watch_streams,
        )
        yield from _maintenance(snapshot)

    def _plugins(self) -> Iterator[Metric]:
        plugins = self.introspection.plugins
        if plugins is None:
            return
        info = GaugeMetricFamily(
            "roleserve_plugin_info",
            "1 for each plugin the node found, with its version and load state.",
            labels=("name", "version", "state"),
        )
        failures = CounterMetricFamily(
            "roleserve_plugin_hook_failures",
            "Calls of a plugin's hook that raised or timed out.",
            labels=("name", "hook"),
        )
        for plugin in plugins.infos():
            info.add_metric((plugin.name, plugin.version or "", str(plugin.state)), 1.0)
            for hook, count in sorted(plugin.hook_failures.items()):
                failures.add_metric((plugin.name, hook), count)
        yield from (info, failures)


def _build_info(build: tuple[str, str]) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "roleserve_build_info",
        "1, with the versions of roleserve-core and of Python the node runs.",
        labels=("version", "python"),
    )
    info.add_metric(build, 1.0)
    yield info


def _histograms(name: str, documentation: str, label: str, latencies: Latencies) -> Metric:
    """One histogram family with a series per key of ``latencies``, labelled ``label``."""
    family = HistogramMetricFamily(name, documentation, labels=(label,))
    for key, histogram in sorted(latencies.by_key.items()):
        family.add_metric((key,), _buckets(histogram), histogram.sum)
    return family


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    return [(_bound(bound), count) for bound, count in histogram.cumulative()]


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _histogram(name: str, documentation: str, histogram: Histogram) -> Metric:
    return HistogramMetricFamily(
        name, documentation, buckets=_buckets(histogram), sum_value=histogram.sum
    )


def core_registry(introspection: NodeIntrospection) -> CollectorRegistry:
    """A registry of the node's own (never the global one) holding its ``CoreCollector``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CoreCollector(introspection))
    return registry


def _maintenance(snapshot: LeaderSnapshot) -> Iterator[Metric]:
    """What the leading curator's etcd maintenance did. etcd's own metrics (the ``etcd``
    exporter) already give the database size and size in use, the revision and the quota
    (``etcd_mvcc_db_total_size_in_bytes``, ``etcd_mvcc_db_total_size_in_use_in_bytes``,
    ``etcd_debugging_mvcc_current_revision``, ``etcd_server_quota_backend_bytes``), so
    only what etcd cannot know is here."""
    yield GaugeMetricFamily(
        "roleserve_curator_etcd_compacted_revision",
        "The revision the leading curator last compacted etcd's history to (0: not yet).",
        value=snapshot.compacted_revision,
    )
    yield GaugeMetricFamily(
        "roleserve_curator_etcd_last_compaction_timestamp_seconds",
        "Unix time of the leading curator's last compaction of etcd's history (0: none).",
        value=snapshot.compacted_at,
    )
    yield CounterMetricFamily(
        "roleserve_curator_etcd_defragmentations",
        "etcd members the leading curator defragmented since it leads.",
        value=snapshot.defragmentations,
    )
