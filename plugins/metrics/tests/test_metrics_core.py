"""The ``core`` registry against a real supervision tree, values and stats: exact values."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from roleserve_core import (
    BackoffPolicy,
    CrashLoopPolicy,
    LogTree,
    NodeIntrospection,
    RunContext,
    State,
    Supervisor,
    ValueKey,
    ValueRegistry,
    core_version,
)
from roleserve_core.stats import Histogram, LeaderSnapshot
from roleserve_core.testing import (
    FakeClock,
    SupervisorRunner,
    plugin_set,
    wait_for_state,
    wait_for_status,
)
from roleserve_metrics import hooks
from roleserve_metrics.collectors import STATES, core_registry

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

COUNT: ValueKey[int] = ValueKey("count", int, "A test value.")
NEVER: ValueKey[str] = ValueKey("never", str, "A test value never set.")


def scrape(introspection: NodeIntrospection) -> Samples:
    """Every sample of the core registry, by name and sorted labels."""
    text = generate_latest(core_registry(introspection)).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def samples_named(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in samples.items() if sample == name}


async def test_supervisor_metrics_count_failures_and_restarts(
    supervisor_runner: SupervisorRunner, fake_clock: FakeClock
) -> None:
    attempts = 0

    async def flaky(ctx: RunContext) -> None:
        nonlocal attempts
        attempts += 1
        if attempts <= 2:
            raise RuntimeError(f"attempt {attempts}")
        ctx.signal_healthy()
        await anyio.sleep_forever()

    async def steady(ctx: RunContext) -> None:
        ctx.signal_healthy()
        await anyio.sleep_forever()

    async def done(ctx: RunContext) -> None:
        ctx.signal_healthy()
        ctx.signal_done()

    async def root(ctx: RunContext) -> None:
        ctx.run("flaky", flaky)
        ctx.run("steady", steady)
        ctx.run("done", done)
        ctx.signal_healthy()
        await anyio.sleep_forever()

    supervisor = await supervisor_runner.start(
        root, backoff=BackoffPolicy(jitter=0.0), crash_loop=CrashLoopPolicy(threshold=2)
    )
    introspection = NodeIntrospection(ValueRegistry(), LogTree())
    introspection.supervisor.set(supervisor)
    await wait_for_status_failures(supervisor, 1)
    assert await fake_clock.advance_to_next() == 0.5  # the first backoff
    await wait_for_status_failures(supervisor, 2)
    samples = scrape(introspection)
    state = samples_named(samples, "roleserve_runnable_state")
    assert set(state) == {
        (("dn", dn), ("state", name))
        for dn in ("root", "root.flaky", "root.steady", "root.done")
        for name in STATES
    }
    current = {dict(labels)["dn"]: dict(labels)["state"] for labels, v in state.items() if v}
    assert current == {
        "root": "HEALTHY",
        "root.flaky": "NEW",  # waiting out its backoff
        "root.steady": "HEALTHY",
        "root.done": "DONE",
    }
    assert samples[("roleserve_runnable_failures_total", (("dn", "root.flaky"),))] == 2
    # A restart counts when it is scheduled: two deaths, two restarts (one still waiting).
    assert samples[("roleserve_runnable_restarts_total", (("dn", "root.flaky"),))] == 2
    assert samples[("roleserve_runnable_restarts_total", (("dn", "root.steady"),))] == 0
    assert samples[("roleserve_runnable_crash_looping", (("dn", "root.flaky"),))] == 1
    assert samples[("roleserve_runnable_crash_looping", (("dn", "root.steady"),))] == 0

    assert await fake_clock.advance_to_next() == 0.75  # the second backoff: 0.5 × 1.5
    await wait_for_state(supervisor, "root.flaky", State.HEALTHY)
    samples = scrape(introspection)
    assert samples[("roleserve_runnable_restarts_total", (("dn", "root.flaky"),))] == 2
    assert samples[("roleserve_runnable_failures_total", (("dn", "root.flaky"),))] == 2
    assert samples[("roleserve_runnable_state", (("dn", "root.flaky"), ("state", "HEALTHY")))] == 1
    assert samples[("roleserve_runnable_state", (("dn", "root.flaky"), ("state", "DEAD")))] == 0


async def wait_for_status_failures(supervisor: Supervisor, failures: int) -> None:
    await wait_for_status(supervisor, "root.flaky", lambda status: status.failures == failures)


def test_values_stats_plugins_and_build_info() -> None:
    registry = ValueRegistry()
    registry.declare(COUNT, "test")
    registry.declare(NEVER, "test")
    for number in range(3):
        registry.set(COUNT, number, by="test")
    plugins = plugin_set({"metrics": hooks})
    introspection = NodeIntrospection(registry, LogTree(), plugins=plugins)
    stats = introspection.stats
    stats.heartbeat.replied(0.003)
    stats.heartbeat.replied(0.2)
    stats.rpc.record("/roleserve.Curator/Watch", "OK", 0.002)
    stats.rpc.record("/roleserve.Curator/Watch", "OK", 3.0)
    stats.rpc.record("/roleserve.Curator/Watch", "CANCELLED", 7.0)
    stats.rpc.record("/roleserve.Management/GetNodes", "PERMISSION_DENIED", 0.0001)

    samples = scrape(introspection)

    assert samples[("roleserve_value_sets_total", (("key", "count"),))] == 3
    assert samples[("roleserve_value_sets_total", (("key", "never"),))] == 0
    assert ("roleserve_value_last_set_age_seconds", (("key", "count"),)) in samples
    assert ("roleserve_value_last_set_age_seconds", (("key", "never"),)) not in samples
    assert samples[("roleserve_heartbeat_round_trip_seconds_count", ())] == 2
    assert samples[("roleserve_heartbeat_round_trip_seconds_sum", ())] == pytest.approx(0.203)
    assert samples[("roleserve_heartbeat_round_trip_seconds_bucket", (("le", "0.005"),))] == 1
    assert samples[("roleserve_heartbeat_round_trip_seconds_bucket", (("le", "0.25"),))] == 2
    assert samples[("roleserve_heartbeat_round_trip_seconds_bucket", (("le", "+Inf"),))] == 2
    assert 0 <= samples[("roleserve_heartbeat_last_reply_age_seconds", ())] < 60
    watch = "/roleserve.Curator/Watch"
    handled = samples_named(samples, "roleserve_grpc_server_handled_total")
    assert handled == {
        (("code", "OK"), ("method", watch)): 2,
        (("code", "CANCELLED"), ("method", watch)): 1,
        (("code", "PERMISSION_DENIED"), ("method", "/roleserve.Management/GetNodes")): 1,
    }
    watch_buckets = {
        dict(labels)["le"]: value
        for labels, value in samples_named(
            samples, "roleserve_grpc_server_handling_seconds_bucket"
        ).items()
        if dict(labels)["method"] == watch
    }
    assert watch_buckets["0.0025"] == 1
    assert watch_buckets["5.0"] == 2
    assert watch_buckets["10.0"] == 3
    assert watch_buckets["+Inf"] == 3
    info = samples_named(samples, "roleserve_plugin_info")
    assert info == {(("name", "metrics"), ("state", "loaded"), ("version", "")): 1}
    build = samples_named(samples, "roleserve_build_info")
    assert [dict(labels)["version"] for labels in build] == [core_version()]
    # Not connected: no connected seconds, and no connection ever made.
    assert ("roleserve_curator_connected_seconds", ()) not in samples
    assert ("roleserve_runnable_state", ()) not in samples  # no supervisor yet: no series
    assert ("roleserve_curator_watch_streams", ()) not in samples  # not leading
    assert not samples_named(samples, "roleserve_curator_etcd_request_seconds_count")

    stats.etcd.observe("get prefix", 0.003)
    stats.etcd.observe("get prefix", 0.2)
    stats.etcd.observe("transaction", 0.004)
    samples = scrape(introspection)
    assert samples_named(samples, "roleserve_curator_etcd_request_seconds_count") == {
        (("operation", "get prefix"),): 2,
        (("operation", "transaction"),): 1,
    }
    prefix_buckets = {
        dict(labels)["le"]: value
        for labels, value in samples_named(
            samples, "roleserve_curator_etcd_request_seconds_bucket"
        ).items()
        if dict(labels)["operation"] == "get prefix"
    }
    assert (prefix_buckets["0.0025"], prefix_buckets["0.005"], prefix_buckets["0.25"]) == (0, 1, 2)

    stats.leader = lambda: LeaderSnapshot(
        {("UP", "HEALTHY"): 2, ("NEW", "UNKNOWN"): 1},
        3,
        compacted_revision=5003,
        compacted_at=1_700_000_000.5,
        defragmentations=3,
    )
    samples = scrape(introspection)
    assert samples_named(samples, "roleserve_curator_nodes") == {
        (("health", "HEALTHY"), ("state", "UP")): 2,
        (("health", "UNKNOWN"), ("state", "NEW")): 1,
    }
    assert samples[("roleserve_curator_watch_streams", ())] == 3
    # etcd's own metrics have the sizes and revisions; the curator adds what it did.
    assert samples[("roleserve_curator_etcd_compacted_revision", ())] == 5003
    assert samples[("roleserve_curator_etcd_last_compaction_timestamp_seconds", ())] == (
        1_700_000_000.5
    )
    assert samples[("roleserve_curator_etcd_defragmentations_total", ())] == 3


def test_histogram_buckets_are_cumulative_and_bounded() -> None:
    histogram = Histogram((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 9.0):
        histogram.observe(value)
    assert histogram.cumulative() == [(1.0, 2), (2.0, 3), (float("inf"), 4)]
    assert histogram.count == 4
    assert histogram.sum == 12.0
