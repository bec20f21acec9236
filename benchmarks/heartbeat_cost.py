"""The leading curator's CPU per heartbeat: its Heartbeat handler behind its whole rpc
layer, against bare grpc.aio over the same mutual TLS, in the same run.

Run: ``./dev sync && .venv/bin/python benchmarks/heartbeat_cost.py [--nodes 50 --rate 200]``.

``curator_load.py`` measures the curator whole (5.9 % of a core per 1,000 nodes with
heartbeats only, at 10,000); this one takes one heartbeat apart. Each server runs in a
process of its own (``--node``), the simulated nodes in this one, each on a channel of its
own with its own node certificate and a real node's keepalive pings (every 30 s,
``NODE_KEEPALIVE_OPTIONS``), together beating ``--rate`` times a second (200: the
rate of 1,000 nodes at the 5 s interval; the cost per beat depends on the rate, since
beats that arrive together share the wake-ups of the threads). Over each window, the
server's CPU time per beat answered, from ``/proc/PID/task``, by thread:

- ``loop``: the event loop's thread (the handler, asyncio, grpc.aio's Cython, and what
  the kernel does in its system calls);
- ``poller``: grpc.aio's completion-queue poller, which hands each finished batch (one
  message read, one message sent) to the loop through a socket;
- ``C-core``: gRPC core's EventEngine threads (reading the socket, TLS, HTTP/2).

Servers, each measured ``--rounds`` times, in turn (each round in another order):

- ``curator``: ``create_server`` with the leader's node gate (``DecommissionedGate``) and
  call counting (``RpcStats``, as a node's servers count for the metrics plugin), serving
  ``CuratorService.Heartbeat`` of a leader whose node cache holds every simulated node;
- ``bare``: plain ``grpc.aio.server`` on the same TLS port, answering every beat from an
  async generator (the baseline);
- ``bare-rw``: the same with grpc.aio's reader/writer API (``context.read``/``write``)
  instead of the request iterator and the async generator.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import grpc
from _child import child_node

# This file's directory leaves sys.path (see benchmarks/etcd.py): etcd3aio's namespace
# package ``etcd`` must not meet benchmarks/etcd.py.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [entry for entry in sys.path if str(Path(entry or ".").resolve()) != _HERE]

from typing_extensions import override  # noqa: E402

from roleserve_controlplane.consensus import EtcdClient  # noqa: E402
from roleserve_controlplane.curator.cache import NodeCache  # noqa: E402
from roleserve_controlplane.curator.health import DEFAULT_HEARTBEAT_INTERVAL, Heartbeats  # noqa: E402
from roleserve_controlplane.curator.leader import LeaderState  # noqa: E402
from roleserve_controlplane.curator.service_curator import CuratorService, add_to_server  # noqa: E402
from roleserve_controlplane.curator.standing import DecommissionedGate  # noqa: E402
from roleserve_controlplane.proto import state_pb2  # noqa: E402
from roleserve_core import MonotonicClock, common_pb2  # noqa: E402
from roleserve_core.connection.leader import NODE_KEEPALIVE_OPTIONS  # noqa: E402
from roleserve_core.identity import NodeCredentials  # noqa: E402
from roleserve_core.proto import curator_pb2, curator_pb2_grpc  # noqa: E402
from roleserve_core.rpc import bind, create_server, secure_channel  # noqa: E402
from roleserve_core.rpc._admission import ADMITTED_METADATA  # noqa: E402
from roleserve_core.stats import RpcStats  # noqa: E402
from roleserve_core.testing import ThrowawayCA  # noqa: E402

KINDS = ("curator", "bare", "bare-rw")
WARM_UP = 3.0
"""Seconds every node beats before a window opens (TLS handshakes, first calls)."""
THREADS = ("loop", "poller", "C-core")


# -- the servers ----------------------------------------------------------------------


class BareCurator(curator_pb2_grpc.CuratorServicer):
    """Answers every beat from an async generator, as the curator's handler is written."""

    @override
    async def Heartbeat(
        self, request_iterator: AsyncIterator[curator_pb2.HeartbeatRequest], context: Any
    ) -> AsyncIterator[curator_pb2.HeartbeatResponse]:
        # The load's nodes start writing once admitted, as roleserve's clients do.
        await context.send_initial_metadata(ADMITTED_METADATA)
        response = curator_pb2.HeartbeatResponse()
        async for _ in request_iterator:
            yield response


class BareReaderWriter(curator_pb2_grpc.CuratorServicer):
    """Answers every beat through ``context.read`` and ``context.write``."""

    @override
    async def Heartbeat(  # type: ignore[override]  # the reader/writer API returns None
        self, request_iterator: AsyncIterator[curator_pb2.HeartbeatRequest], context: Any
    ) -> None:
        await context.send_initial_metadata(ADMITTED_METADATA)
        response = curator_pb2.HeartbeatResponse()
        while await context.read() is not grpc.aio.EOF:
            await context.write(response)


@dataclass
class _HeartbeatLeader:
    """What ``CuratorService.Heartbeat`` reads of a ``LeaderState``: the node cache (the
    node must be known; the gate reads it too) and the heartbeats."""

    cache: NodeCache
    heartbeats: Heartbeats


def curator_server(credentials: NodeCredentials, nodes: list[str]) -> grpc.aio.Server:
    """The leader's server with its gate and counting, serving ``CuratorService``."""
    # No etcd: the cache is filled here, and nothing in the Heartbeat path reads etcd.
    cache = NodeCache(cast(EtcdClient, None))
    for node in nodes:
        cache.nodes[node] = state_pb2.NodeRecord(id=node, state=common_pb2.NODE_STATE_UP)
    cache.ready.set()
    leader = _HeartbeatLeader(cache, Heartbeats(MonotonicClock(), DEFAULT_HEARTBEAT_INTERVAL))
    server = create_server(credentials, gate=DecommissionedGate(cache), stats=RpcStats())
    add_to_server(CuratorService(cast(LeaderState, leader)), server)
    return server


async def serve(kind: str, directory: Path, count: int) -> None:
    """Serve ``kind`` with the server credentials in ``directory``; print the port; run
    until stdin closes."""
    credentials = NodeCredentials.load(directory / "server")
    if kind == "curator":
        nodes = [node_credentials(directory, index).node_id for index in range(count)]
        server = curator_server(credentials, nodes)
    else:
        server = grpc.aio.server()
        # The servicers implement Heartbeat only: the generated base declares every method
        # abstract, and answers UNIMPLEMENTED for the rest.
        servicer: curator_pb2_grpc.CuratorServicer = (
            BareCurator() if kind == "bare" else BareReaderWriter()  # type: ignore[abstract]
        )
        curator_pb2_grpc.add_CuratorServicer_to_server(servicer, server)
    port = bind(server, "127.0.0.1:0", credentials)
    await server.start()
    print(port, flush=True)
    try:
        await anyio.wrap_file(sys.stdin).read()
    finally:
        await server.stop(0)


# -- the load and the measurement -------------------------------------------------------


def node_credentials(directory: Path, index: int) -> NodeCredentials:
    return NodeCredentials.load(directory / str(index))


def make_credentials(directory: Path, count: int) -> None:
    """The server's node credentials and ``count`` simulated nodes', of one cluster."""
    ca = ThrowawayCA()
    ca.node().save(directory / "server")
    for index in range(count):
        ca.node().save(directory / str(index))


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of ``pid`` by kind of thread (``THREADS``)."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds = dict.fromkeys(THREADS, 0.0)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        used = (int(fields[11]) + int(fields[12])) / tick
        if task.name == str(pid):
            seconds["loop"] += used
        elif name.startswith("event_engine"):
            seconds["C-core"] += used
        else:
            seconds["poller"] += used
    return seconds


class Load:
    """``count`` simulated nodes beating ``rate`` times a second together."""

    def __init__(self, directory: Path, port: int, count: int, rate: float) -> None:
        self.directory = directory
        self.port = port
        self.count = count
        self.period = count / rate
        self.replies = 0
        self.running = True
        """Cleared to end every node after its current beat: each closes its channel
        before the server stops (a cancelled close would leave it to the server's GOAWAY)."""

    async def node(self, index: int) -> None:
        credentials = node_credentials(self.directory, index)
        async with secure_channel(
            f"127.0.0.1:{self.port}", credentials, options=NODE_KEEPALIVE_OPTIONS
        ) as channel:
            call = curator_pb2_grpc.CuratorStub(channel).Heartbeat()
            await call.initial_metadata()  # admitted
            await anyio.sleep(self.period * index / self.count)  # spread over the period
            request = curator_pb2.HeartbeatRequest(instance=f"benchmark-{index}")
            while self.running:
                start = time.perf_counter()
                await call.write(request)
                await call.read()
                self.replies += 1
                await anyio.sleep(max(0.0, self.period - (time.perf_counter() - start)))
            await call.done_writing()


@dataclass
class Measured:
    beats: int
    seconds: float
    cpu: dict[str, float]

    def per_beat(self, thread: str | None = None) -> float:
        """Microseconds of the server's CPU per beat, of one kind of thread or all."""
        used = sum(self.cpu.values()) if thread is None else self.cpu[thread]
        return used / self.beats * 1e6


async def measure(kind: str, directory: Path, count: int, rate: float, window: float) -> Measured:
    async with child_node(__file__, [kind, str(directory), str(count)]) as server:
        assert server.stdout is not None
        port = int((await server.stdout.receive()).decode().split()[0])
        load = Load(directory, port, count, rate)
        async with anyio.create_task_group() as tasks:
            for index in range(count):
                tasks.start_soon(load.node, index)
            await anyio.sleep(WARM_UP + count / rate)
            before, beats, start = thread_cpu(server.pid), load.replies, time.perf_counter()
            await anyio.sleep(window)
            after = thread_cpu(server.pid)
            measured = Measured(
                load.replies - beats,
                time.perf_counter() - start,
                {thread: after[thread] - before[thread] for thread in THREADS},
            )
            load.running = False
    return measured


def report(kind: str, measured: Measured) -> None:
    split = ", ".join(f"{thread} {measured.per_beat(thread):.0f}" for thread in THREADS)
    per_thousand = measured.per_beat() * 1e-6 * (1000 / DEFAULT_HEARTBEAT_INTERVAL) * 100
    print(
        f"  {kind:8} {measured.per_beat():6.0f} µs of CPU per beat ({split}); "
        f"{measured.beats / measured.seconds:.0f} beats/s; as 1,000 nodes at "
        f"{DEFAULT_HEARTBEAT_INTERVAL:g} s: {per_thousand:.1f} % of a core"
    )


async def main(count: int, rate: float, window: float, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="heartbeat-cost-") as temporary:
        directory = Path(temporary)
        make_credentials(directory, count)
        print(f"{count} nodes beating {rate:g} times a second together; windows of {window:g} s")
        results: dict[str, list[Measured]] = {kind: [] for kind in KINDS}
        for round_ in range(1, rounds + 1):
            print(f"round {round_}")
            # Each round in another order: a machine whose load drifts favours no kind.
            shift = (round_ - 1) % len(KINDS)
            for kind in KINDS[shift:] + KINDS[:shift]:
                measured = await measure(kind, directory, count, rate, window)
                results[kind].append(measured)
                report(kind, measured)
        print("ratio to bare (all rounds): ", end="")
        bare = sum(m.per_beat() for m in results["bare"])
        print(
            ", ".join(
                f"{kind} {sum(m.per_beat() for m in results[kind]) / bare:.2f}×"
                for kind in KINDS
                if kind != "bare"
            )
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--node"]:
        kind, directory, count = sys.argv[2:5]
        anyio.run(serve, kind, Path(directory), int(count), backend="asyncio")
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50, help="simulated nodes (50)")
    parser.add_argument("--rate", type=float, default=200.0, help="beats a second (200)")
    parser.add_argument("--window", type=float, default=15.0, help="seconds measured (15)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every server (2)")
    options = parser.parse_args()
    anyio.run(main, options.nodes, options.rate, options.window, options.rounds, backend="asyncio")
