"""The curator under load: N simulated nodes heartbeating and watching, one curator.

Run: ``./dev sync && .venv/bin/python benchmarks/curator_load.py [--sizes 1000 5000 10000]``.

A curator (with its etcd) runs in a process of its own, so that its CPU time can be read
from /proc. This process simulates N nodes over a few channels (each channel is one
enrolled node's mutual TLS identity; the simulated nodes share them): every simulated node
sends a heartbeat at the curator's interval (5 s, each node at its own random offset) and
holds a one-node Watch stream, all on the same node, so that one role change of that node
fans out to all N watchers. For each N:

- heartbeat latency p50 and p99 (send → the curator's answer), over two intervals;
- the curator process's CPU use over the same window;
- the fan-out time of one role change (``UpdateNodeRoles``) to all N watchers.

Baseline, in the same run: plain insecure gRPC bidi ping-pong between two tasks of this
process (the transport alone).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import grpc
from _report import print_comparison, summarise
from anyio.streams.buffered import BufferedByteReceiveStream

# This file's directory leaves sys.path (see benchmarks/etcd.py): etcd3aio's namespace
# package ``etcd`` must not meet benchmarks/etcd.py.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [entry for entry in sys.path if str(Path(entry or ".").resolve()) != _HERE]

from typing_extensions import override  # noqa: E402

from roleserve_controlplane.consensus import DEFAULT_TTL  # noqa: E402
from roleserve_controlplane.testing import (  # noqa: E402
    CuratorCluster,
    EtcdClusterRunner,
    enrol_node,
    etcd_binary,
)
from roleserve_core.identity import (  # noqa: E402
    NodeCredentials,
    UserCredentials,
    generate_key,
)
from roleserve_core.proto import (  # noqa: E402
    curator_pb2,
    curator_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
)
from roleserve_core.rpc import secure_channel  # noqa: E402

CHANNELS = 8
"""Channels (enrolled node identities) the simulated nodes share."""
INTERVAL = 5.0


# -- the curator's process -------------------------------------------------------------


async def serve(directory: Path) -> None:
    """Bootstrap a cluster, write what clients need into ``directory``, serve until killed."""
    logging.getLogger("roleserve").propagate = False
    async with (
        EtcdClusterRunner(etcd_binary("debian"), directory / "etcd") as etcd,
        CuratorCluster(etcd, heartbeat_interval=INTERVAL, lease_ttl=DEFAULT_TTL) as curators,
    ):
        leader = await curators.bootstrap()
        assert curators.owner is not None
        curators.owner.save(directory / "owner")
        print(leader.endpoint, leader.node_id, flush=True)  # the parent waits for this line
        await anyio.sleep_forever()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the simulated nodes ---------------------------------------------------------------


class EchoCurator(curator_pb2_grpc.CuratorServicer):
    """Answers heartbeats at once, for the baseline."""

    @override
    async def Heartbeat(
        self, request_iterator: AsyncIterator[curator_pb2.HeartbeatRequest], context: Any
    ) -> AsyncIterator[curator_pb2.HeartbeatResponse]:
        async for _ in request_iterator:
            yield curator_pb2.HeartbeatResponse()


class Load:
    """N simulated nodes on a few channels, each heartbeating and watching the hot node."""

    def __init__(self, channels: list[Any], hot: str) -> None:
        self.channels = channels
        self.hot = hot
        self.latencies: list[float] = []
        self.recording = False
        self.seen: dict[int, float] = {}
        self.marker = ""
        self.expected = 0
        self.all_seen = anyio.Event()

    async def node(self, index: int, *, task_status: Any) -> None:
        channel = self.channels[index % len(self.channels)]
        stub = curator_pb2_grpc.CuratorStub(channel)
        async with anyio.create_task_group() as tasks:
            await tasks.start(self._watch, stub, index)
            tasks.start_soon(self._heartbeat, stub)
            task_status.started()

    async def _watch(self, stub: Any, index: int, *, task_status: Any) -> None:
        request = curator_pb2.WatchRequest(
            node_in_cluster=curator_pb2.WatchRequest.NodeInCluster(node_id=self.hot)
        )
        stream = stub.Watch(request)
        started = False
        async for event in stream:
            if not started:
                task_status.started()
                started = True
            for node in event.nodes:
                bench = node.roles.custom.get("bench")
                if self.marker and bench is not None and bench.parameters["marker"] == self.marker:
                    self.seen.setdefault(index, time.perf_counter())
                    if len(self.seen) == self.expected:
                        self.all_seen.set()

    async def _heartbeat(self, stub: Any) -> None:
        send, receive = anyio.create_memory_object_stream[curator_pb2.HeartbeatRequest](1)

        async def requests() -> AsyncIterator[curator_pb2.HeartbeatRequest]:
            async with receive:
                async for request in receive:
                    yield request

        stream = stub.Heartbeat(requests())
        answers = aiter(stream)
        await anyio.sleep(random.random() * INTERVAL)
        async with send:
            while True:
                start = time.perf_counter()
                await send.send(curator_pb2.HeartbeatRequest())
                await anext(answers)
                if self.recording:
                    self.latencies.append(time.perf_counter() - start)
                await anyio.sleep(INTERVAL - (time.perf_counter() - start))


async def fan_out(load: Load, management: Any, watchers: int) -> float:
    """Seconds from a role change of the hot node until every watcher has seen it."""
    load.seen = {}
    load.expected = watchers
    load.all_seen = anyio.Event()
    load.marker = f"m{random.random()}"
    change = management_pb2.UpdateNodeRolesRequest.Change(
        role="custom:bench", assign=True, parameters={"marker": load.marker}
    )
    start = time.perf_counter()
    await management.UpdateNodeRoles(
        management_pb2.UpdateNodeRolesRequest(node_id=load.hot, changes=[change])
    )
    with anyio.fail_after(120):
        await load.all_seen.wait()
    return max(load.seen.values()) - start


async def ping_pong_baseline(rounds: int) -> list[float]:
    """Insecure bidi ping-pong on one stream, in this process."""
    server = grpc.aio.server()
    curator_pb2_grpc.add_CuratorServicer_to_server(EchoCurator(), server)  # type: ignore[abstract]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    samples = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            send, receive = anyio.create_memory_object_stream[curator_pb2.HeartbeatRequest](1)

            async def requests() -> AsyncIterator[curator_pb2.HeartbeatRequest]:
                async with receive:
                    async for request in receive:
                        yield request

            stream = curator_pb2_grpc.CuratorStub(channel).Heartbeat(requests())
            answers = aiter(stream)
            async with send:
                for index in range(rounds + 100):
                    start = time.perf_counter()
                    await send.send(curator_pb2.HeartbeatRequest())
                    await anext(answers)
                    if index >= 100:
                        samples.append(time.perf_counter() - start)
            stream.cancel()
    finally:
        await server.stop(None)
    return samples


async def main(sizes: list[int]) -> None:
    """Start the curator's process, then load it at each size."""
    logging.getLogger("roleserve").propagate = False
    with tempfile.TemporaryDirectory() as scratch:
        server = await anyio.open_process(
            [sys.executable, __file__, "--serve", scratch], stderr=subprocess.DEVNULL
        )
        try:
            assert server.stdout is not None
            with anyio.fail_after(60):
                line = await BufferedByteReceiveStream(server.stdout).receive_until(b"\n", 4096)
            endpoint, leader_id = line.decode().split()
            await measure(Path(scratch), server.pid, endpoint, leader_id, sizes)
        finally:
            server.send_signal(signal.SIGINT)
            with anyio.move_on_after(30):
                await server.wait()
            await server.aclose()


async def measure(
    directory: Path, pid: int, endpoint: str, leader_id: str, sizes: list[int]
) -> None:
    """Enrol the channels' identities, then load the curator at each size."""
    owner = UserCredentials.load(directory / "owner")
    identities: list[NodeCredentials] = []
    for index in range(CHANNELS):
        address = ipaddress.ip_address(f"127.0.0.{100 + index}")
        identities.append(await enrol_node(endpoint, leader_id, owner, generate_key(), address))
    baseline = summarise(await ping_pong_baseline(2000))
    async with contextlib.AsyncExitStack() as stack:
        channels = [
            await stack.enter_async_context(
                secure_channel(
                    endpoint,
                    identity,
                    node_id=leader_id,
                    options=[("grpc.max_concurrent_streams", 100_000)],
                )
            )
            for identity in identities
        ]
        management_channel = await stack.enter_async_context(
            secure_channel(endpoint, owner, node_id=leader_id)
        )
        management = management_pb2_grpc.ManagementStub(management_channel)
        load = Load(channels, hot=identities[0].node_id)
        tasks = await stack.enter_async_context(anyio.create_task_group())
        running = 0
        for size in sizes:
            for index in range(running, size):
                await tasks.start(load.node, index)
            running = size
            await anyio.sleep(INTERVAL)  # every node has sent its first heartbeat
            load.latencies = []
            load.recording = True
            cpu_before, wall_before = cpu_seconds(pid), time.perf_counter()
            own_before = cpu_seconds(os.getpid())
            await anyio.sleep(2 * INTERVAL)
            cpu = cpu_seconds(pid) - cpu_before
            own = cpu_seconds(os.getpid()) - own_before
            wall = time.perf_counter() - wall_before
            load.recording = False
            fanned = await fan_out(load, management, size)
            print_comparison(
                f"N = {size:,}: heartbeat round trips over {2 * INTERVAL:.0f} s",
                summarise(load.latencies),
                baseline,
                "insecure bidi ping-pong, one stream, no load",
            )
            print(f"  curator CPU   {100 * cpu / wall:.0f} % of one core")
            print(
                f"  load CPU      {100 * own / wall:.0f} % of one core (this process: the "
                "simulated nodes; near 100 % means the latencies are the simulator's too)"
            )
            print(f"  fan-out       one role change to all {size:,} watchers in {fanned:.3f} s")
        tasks.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(serve, Path(options.serve), backend="asyncio")
    else:
        anyio.run(main, options.sizes, backend="asyncio")
