"""cluster_nodes: Watch streams, node memory and latency of its readers; hosts-file render.

Run: ``./dev sync && .venv/bin/python benchmarks/cluster_nodes.py [--nodes 1000] [--changes 200]``.

This process serves one ``FakeCurator`` (real gRPC with mutual TLS) holding ``--nodes``
nodes. Each node configuration runs in a process of its own (this program again), so that
its memory is the node's alone: a node runtime of ``PluginHarness(cluster_nodes=True)``
(the core's ``nodewatch``) plus a plugin of N reader workers, connected to the curator.

(c1) Watch streams open at the curator, and the node's memory once every reader holds
     the whole backlog, for N = 1, 3, 5 workers declaring ``reads=(CLUSTER_NODES,)`` and
     watching the value. Memory: tracemalloc (current and peak, Python objects only: the
     upb arenas of the protobuf records are not traced) and the VmRSS delta (everything,
     arenas and gRPC buffers included) from before the runtime was built. Baselines: N = 0
     (nobody reads: nodewatch idles, no stream), and N workers each holding its own
     ``Watch(NodesInCluster)`` folded by hand (``NodeWatchFold``), the way before
     ``cluster_nodes``: N streams, N maps. The program exits 1 if a configuration reading
     ``cluster_nodes`` holds any number of streams but 1 (0 with no reader).
(c2) Latency from one node's status change (``FakeCurator.set_node``) until every reader's
     view shows it, p50/p99, in each configuration of (c1). Baseline, run just before each:
     a process holding only a raw ``Curator.Watch`` of every node (no node runtime), from
     the same kind of change until the event arrives. Timed across the two processes with
     the wall clock of this one machine; on a small machine shared with other work,
     differences of a few hundred µs between runs are noise.
(c3) A hosts file of 10,000 nodes rewritten as the hostsfile worker does it (fold the
     addresses, render the block, read and merge the file, replace it with fsync and
     rename); baseline: ``write_atomically`` of the same bytes alone.
(c4) What nodewatch and a ``follow_changes`` reader spend per event at 10,000 nodes:
     ``ClusterNodes(...)`` of the fold's map (one per published view) against a plain
     ``dict`` copy, and ``node_changes(old, new)`` of two consecutive views.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
from _child import child_node
from _proc import status_value
from _report import print_comparison, summarise
from anyio.streams.buffered import BufferedByteReceiveStream

from roleserve_core.clock import MonotonicClock
from roleserve_core.clusternodes import ClusterNodes, NodeWatchFold, node_changes
from roleserve_core.connection import on_each_connection
from roleserve_core.files import write_atomically
from roleserve_core.hookspecs import hookimpl
from roleserve_core.identity import NodeCredentials
from roleserve_core.node import NodeContext, Worker
from roleserve_core.proto import common_pb2, curator_pb2, curator_pb2_grpc
from roleserve_core.rpc import secure_channel
from roleserve_core.supervisor import RunContext
from roleserve_core.testing import (
    FakeCurator,
    NodeHarness,
    PluginHarness,
    SupervisorRunner,
    ThrowawayCA,
)
from roleserve_core.values import CLUSTER_NODES, CURATOR_CONNECTION, CuratorConnection
from roleserve_core.workers.nodewatch import IDLE_NOTE
from roleserve_hostsfile.block import fold_addresses, render_block
from roleserve_hostsfile.files import update_hosts_file

Node = curator_pb2.Node
Line = BufferedByteReceiveStream

PROBE = "node-probe"
"""The node whose status (field ``version``) each change of (c2) sets to a new marker."""
READERS = (1, 3, 5)
WARM_UP = 10
"""Changes made before those of (c2) that are timed."""
SHARED, OWN, RAW = "shared", "own", "raw"
"""Reader kinds: workers reading ``cluster_nodes``, or each holding a Watch of its own; or
no node at all, a raw Watch client (the baseline of (c2))."""
NODEWATCH = "root.role.nodewatch"
EVERY_NODE = curator_pb2.WatchRequest(nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster())


# -- the hosts file ---------------------------------------------------------------------

OWN_ID = "node-own"
OWN_ADDRESSES = (ipaddress.ip_address("10.255.0.1"), ipaddress.ip_address("10.255.0.2"))


def rewrite_hosts_file(path: Path, view: ClusterNodes, turn: int) -> bytes:
    """What the hostsfile worker does per whole view: fold the addresses, render the
    block, merge it into the file and replace the file. The node's own address alternates
    between two values, so every turn really writes."""
    fold = fold_addresses({}, view, OWN_ID, OWN_ADDRESSES[turn % 2])
    block = render_block(fold.addresses)
    if not update_hosts_file(path, block):
        raise AssertionError(f"turn {turn} did not write {path}")
    return block


def cluster_node(index: int) -> Node:
    """Node ``index`` of a made-up cluster: an ID, an address, a version, UP."""
    node = Node(id=f"node-{index:05d}", state=common_pb2.NODE_STATE_UP)
    node.status.external_address = f"10.{index >> 16}.{(index >> 8) & 255}.{index & 255}"
    node.status.version = "1.0.0"
    return node


# -- the node's process ------------------------------------------------------------------


class Readers:
    """A plugin of ``count`` reader workers, of kind SHARED or OWN (see the module
    docstring). It prints ``seen MARKER TIME`` once every reader's view shows the probe
    node with status version MARKER."""

    ROLESERVE_PLUGIN_API = 1

    def __init__(self, kind: str, count: int, total: int) -> None:
        self.kind = kind
        self.count = count
        self.total = total
        self.whole: set[int] = set()
        self.all_whole = anyio.Event()
        self.markers = [""] * count
        self.seen: dict[str, int] = {}

    def saw(self, index: int, nodes: Mapping[str, Node]) -> None:
        """Reader ``index`` holds ``nodes``, whole (its backlog read)."""
        probe = nodes.get(PROBE)
        marker = probe.status.version if probe is not None else ""
        changed, self.markers[index] = marker != self.markers[index], marker
        if len(nodes) == self.total and index not in self.whole:
            self.whole.add(index)
            if len(self.whole) == self.count:
                self.all_whole.set()
        elif changed and self.all_whole.is_set():
            self.seen[marker] = self.seen.get(marker, 0) + 1
            if self.seen[marker] == self.count:
                print(f"seen {marker} {time.time()}", flush=True)
                del self.seen[marker]

    @hookimpl
    def roleserve_workers(self, node: NodeContext) -> list[Worker]:
        """The readers, ``reader0`` …; always running."""
        make = self._shared if self.kind == SHARED else self._own
        return [make(node, index) for index in range(self.count)]

    def _shared(self, node: NodeContext, index: int) -> Worker:
        async def run(ctx: RunContext) -> None:
            """Watches cluster_nodes."""
            with node.values.watch(CLUSTER_NODES) as views:
                self.saw(index, await views.get(filter=lambda view: view.backlogged))
                ctx.signal_healthy()
                async for view in views:
                    if view.backlogged:
                        self.saw(index, view)

        return Worker(f"reader{index}", run, reads=(CLUSTER_NODES,))

    def _own(self, node: NodeContext, index: int) -> Worker:
        async def session(connection: CuratorConnection) -> None:
            fold = NodeWatchFold()
            curator = curator_pb2_grpc.CuratorStub(connection.channel)
            async for event in curator.Watch(EVERY_NODE):
                if fold.apply(event):
                    self.saw(index, fold.nodes)

        async def run(ctx: RunContext) -> None:
            """Folds a Watch of its own."""
            ctx.signal_healthy()
            await on_each_connection(ctx, node.values, session)

        return Worker(f"reader{index}", run, reads=(CURATOR_CONNECTION,))


async def raw_watch(channel: Any, *, task_status: Any) -> None:
    """The baseline of (c2): a bare Watch; prints ``seen MARKER TIME`` per probe event."""
    curator = curator_pb2_grpc.CuratorStub(channel)
    started = False
    async for event in curator.Watch(EVERY_NODE):
        if not started:
            started = True
            task_status.started()
            continue
        for node in event.nodes:
            if node.id == PROBE:
                print(f"seen {node.status.version} {time.time()}", flush=True)


async def run_node(directory: Path, endpoint: str, curator_id: str, kind: str, count: int) -> None:
    """One node (or the raw Watch client): print ``ready RSS_DELTA TRACED PEAK`` once it holds
    the whole backlog, then follow changes until stdin closes."""
    logging.getLogger("roleserve").propagate = False
    credentials = NodeCredentials.load(directory / "node")
    total = int((directory / "total").read_text())
    channel = secure_channel(endpoint, credentials, node_id=curator_id)
    if kind == RAW:
        async with channel, anyio.create_task_group() as tasks:
            await tasks.start(raw_watch, channel)
            print("ready 0 0 0", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)  # until stdin closes
            tasks.cancel_scope.cancel()
        return
    gc.collect()
    rss_before = status_value("self", "VmRSS")
    tracemalloc.start()
    readers = Readers(kind, count, total)
    plugins = PluginHarness(cluster_nodes=True)
    plugins.register(readers, "bench")
    runtime = plugins.runtime(directory / f"data-{kind}{count}")
    async with channel, SupervisorRunner(MonotonicClock()) as runner:
        harness = await NodeHarness.start(runner, runtime)
        connection = CuratorConnection(credentials.node_id, curator_id, endpoint, channel)
        harness.set(CURATOR_CONNECTION, connection)
        if count:
            await readers.all_whole.wait()
        else:
            await harness.wait_status(NODEWATCH, lambda status: status.note == IDLE_NOTE)
            await anyio.sleep(0.5)  # time for a stream to open, if one would
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"ready {status_value('self', 'VmRSS') - rss_before} {current} {peak}", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # until stdin closes


# -- this process: the curator, (c1) and (c2) ---------------------------------------------


async def read_line(stream: Line) -> list[str]:
    """The words of the next line a node process printed."""
    with anyio.fail_after(120):
        return (await stream.receive_until(b"\n", 1 << 16)).decode().split()


class Measured:
    """One node configuration's figures."""

    def __init__(self, kind: str, count: int, words: list[str], streams: int) -> None:
        self.kind = kind
        self.count = count
        self.rss_kib = int(words[1])
        self.current = int(words[2])
        self.peak = int(words[3])
        self.streams = streams
        self.latency: list[float] = []


async def measure_node(
    curator: FakeCurator, directory: Path, kind: str, count: int, changes_: int
) -> Measured:
    """Run one node configuration: streams and memory, then ``changes_`` probe changes."""
    arguments = [str(directory), curator.endpoint, curator.node_id, kind, str(count)]
    async with child_node(__file__, arguments) as process:
        assert process.stdout is not None
        output = Line(process.stdout)
        words = await read_line(output)
        assert words[0] == "ready", words
        measured = Measured(kind, count, words, curator.open_watches.get_nowait())
        if count:
            probe = cluster_node(0)
            probe.id = PROBE
            for change in range(-WARM_UP, changes_):
                marker = f"{kind}{count}-{change}"
                probe.status.version = marker
                start = time.time()
                curator.set_node(probe)
                while True:
                    _, seen, when = await read_line(output)
                    if seen == marker:
                        if change >= 0:
                            measured.latency.append(float(when) - start)
                        break
        return measured


def memory_table(results: list[Measured], nodes: int) -> bool:
    """Print (c1); True if every configuration reading cluster_nodes held the streams it
    should."""
    print(f"(c1) Watch streams at the curator and node memory, {nodes:,} nodes")
    print("  readers                          streams  tracemalloc now / peak   VmRSS Δ")
    ok = True
    for result in results:
        what = "cluster_nodes" if result.kind == SHARED else "own Watch + fold each"
        expected = (1 if result.count else 0) if result.kind == SHARED else result.count
        mark = "" if result.streams == expected else f"   << expected {expected}"
        ok = ok and (result.kind == OWN or result.streams == expected)
        print(
            f"  {result.count} × {what:<28} {result.streams:>5}"
            f"  {result.current / 2**20:7.2f} / {result.peak / 2**20:6.2f} MiB"
            f"  {result.rss_kib / 1024:6.1f} MiB{mark}"
        )
    shared = {r.count: r for r in results if r.kind == SHARED}
    own = {r.count: r for r in results if r.kind == OWN}
    for count in sorted(own):
        if count in shared and count in own:
            print(
                f"  {count} readers: streams {shared[count].streams} vs {own[count].streams};"
                f" tracemalloc {shared[count].current / own[count].current:.2f}×,"
                f" VmRSS Δ {shared[count].rss_kib / max(own[count].rss_kib, 1):.2f}×"
                " the own-Watch baseline"
            )
    return ok


async def main(nodes: int, changes_: int, hosts: int, repeats: int) -> None:
    logging.getLogger("roleserve").propagate = False
    ca = ThrowawayCA()
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="roleserve-bench-") as scratch:
        directory = Path(scratch)
        ca.node().save(directory / "node")
        (directory / "total").write_text(str(nodes))
        async with FakeCurator(ca.node()) as curator:
            curator.lead()
            for index in range(nodes - 1):
                curator.set_node(cluster_node(index + 1))
            probe = cluster_node(0)
            probe.id = PROBE
            curator.set_node(probe)
            baselines: dict[tuple[str, int], Measured] = {}
            configurations = [(SHARED, 0)]
            configurations += [(SHARED, count) for count in READERS]
            configurations += [(OWN, count) for count in READERS]
            for kind, count in configurations:
                if count:  # the baseline of (c2), just before, so that the machine's load
                    raw = await measure_node(curator, directory, RAW, 1, changes_)  # is alike
                    baselines[kind, count] = raw
                results.append(await measure_node(curator, directory, kind, count, changes_))
    ok = memory_table(results, nodes)
    for result in results:
        if not result.count:
            continue
        how = "cluster_nodes" if result.kind == SHARED else "own Watch + fold each"
        print_comparison(
            f"(c2) status change → all {result.count} readers' views ({how}), "
            f"{changes_} changes of 1 of {nodes:,} nodes",
            summarise(result.latency),
            summarise(baselines[result.kind, result.count].latency),
            "one event on a raw Watch, no node; run just before",
        )
    hosts_file(hosts, repeats)
    if not ok:
        print("FAILED: a node reading cluster_nodes held other than one Watch stream")
        sys.exit(1)


# -- (c3) and (c4): pure CPU, this process -----------------------------------------------


def timed(action: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def hosts_file(size: int, repeats: int) -> None:
    """(c3) and (c4) at ``size`` nodes."""
    fold = NodeWatchFold()
    backlog = curator_pb2.WatchEvent(progress=curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED)
    backlog.nodes.extend(cluster_node(index) for index in range(size))
    fold.apply(backlog)
    view = fold.view()
    with tempfile.TemporaryDirectory(prefix="roleserve-bench-") as scratch:
        path = Path(scratch) / "hosts"
        data = rewrite_hosts_file(path, view, 1)
        turns = iter(range(repeats))
        written = timed(lambda: rewrite_hosts_file(path, view, next(turns)), repeats)
        bare = timed(lambda: write_atomically(path, data), repeats)
    addresses = fold_addresses({}, view, OWN_ID, OWN_ADDRESSES[0]).addresses
    render_only = summarise(timed(lambda: render_block(addresses), repeats))
    print_comparison(
        f"(c3) hosts file of {size:,} nodes ({len(data):,} bytes): the hostsfile worker's"
        f" fold + render + merge + replace ({repeats} runs)",
        summarise(written),
        summarise(bare),
        "write_atomically of the same bytes",
    )
    print(f"  render alone median {render_only.median * 1e3:.3f} ms")

    copies = repeats * 5
    print_comparison(
        f"(c4) ClusterNodes(...) of {size:,} nodes, once per published view ({copies} runs)",
        summarise(timed(lambda: ClusterNodes(fold.nodes, backlogged=True), copies)),
        summarise(timed(lambda: dict(fold.nodes), copies)),
        "dict(fold.nodes)",
    )
    one = curator_pb2.WatchEvent()
    changed = one.nodes.add()
    changed.CopyFrom(view[cluster_node(size // 2).id])
    changed.status.version = "2.0.0"

    def event() -> None:
        fold.apply(one)
        fold.view()

    print_comparison(
        f"(c4) nodewatch per event at {size:,} nodes: apply one change + view() ({copies} runs)",
        summarise(timed(event, copies)),
        summarise(timed(lambda: fold.apply(one), copies)),
        "fold.apply alone",
    )
    after = fold.view()
    print_comparison(
        f"(c4) follow_changes per event at {size:,} nodes: node_changes(old, new), 1 node differs"
        f" ({copies} runs)",
        summarise(timed(lambda: node_changes(view, after), copies)),
        summarise(timed(lambda: node_changes(dict(view), dict(after)), copies)),
        "node_changes() of the same two maps as dicts, copies included",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes at the curator")
    parser.add_argument("--changes", type=int, default=200, help="status changes for (c2)")
    parser.add_argument("--hosts", type=int, default=10_000, help="nodes for (c3), (c4)")
    parser.add_argument("--repeats", type=int, default=40, help="runs of (c3)")
    parser.add_argument("--node", nargs=5, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.node:
        where, endpoint, curator_id, kind, count = options.node
        anyio.run(run_node, Path(where), endpoint, curator_id, kind, int(count), backend="asyncio")
    else:
        anyio.run(
            main, options.nodes, options.changes, options.hosts, options.repeats, backend="asyncio"
        )
