"""The curator under load: N simulated nodes heartbeating and watching, one curator.

Run: ``./dev sync && .venv/bin/python benchmarks/curator_load.py [--sizes 1000 5000 10000]``.

Three processes, so that each one's CPU time can be read from /proc and the latency seen
is the curator's, not the simulator's:

- the curator (with its etcd), bootstrapped on a loopback address;
- the load: N simulated nodes over a few channels (each channel one enrolled node's mutual
  TLS identity; the simulated nodes share them). Every simulated node sends a heartbeat at
  the curator's interval (5 s, each at its own random offset) and holds a one-node Watch
  stream, all on the same node, so one role change of that node fans out to N watchers;
- this process, the probe: one more node that sends a heartbeat every 50 ms on its own
  channel and times each round trip. It is lightly loaded, so what it measures is how
  quickly the curator answers while it serves the N others.

For each N: the probe's heartbeat round trips (p50, p99) over two intervals, the curator's
and the load's CPU use over the same window, and the fan-out of one role change
(``UpdateNodeRoles``) until all N watchers have seen it (timed across processes with the
wall clock of this one machine).

Baseline, in the same run: plain insecure gRPC bidi ping-pong between two tasks of this
process (the transport alone).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
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
from _proc import cpu_seconds
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
PROBE_EVERY = 0.05
"""Seconds between the probe's heartbeats."""

Line = BufferedByteReceiveStream


async def read_line(stream: Line) -> str:
    """The next line a child process printed."""
    with anyio.fail_after(300):
        return (await stream.receive_until(b"\n", 1 << 16)).decode()


def requests_of(
    receive: anyio.abc.ObjectReceiveStream[curator_pb2.HeartbeatRequest],
) -> AsyncIterator[curator_pb2.HeartbeatRequest]:
    """A request iterator fed by a memory stream: one heartbeat per ``send``."""

    async def requests() -> AsyncIterator[curator_pb2.HeartbeatRequest]:
        async with receive:
            async for request in receive:
                yield request

    return requests()


async def beat(stub: Any, every: float, samples: list[float] | None, count: int | None) -> None:
    """Heartbeats on one stream, ``every`` seconds; round trips into ``samples``."""
    send, receive = anyio.create_memory_object_stream[curator_pb2.HeartbeatRequest](1)
    stream = stub.Heartbeat(requests_of(receive))
    answers = aiter(stream)
    try:
        async with send:
            sent = 0
            while count is None or sent < count:
                start = time.perf_counter()
                await send.send(curator_pb2.HeartbeatRequest())
                await anext(answers)
                sent += 1
                if samples is not None:
                    samples.append(time.perf_counter() - start)
                await anyio.sleep(max(0.0, every - (time.perf_counter() - start)))
    finally:
        stream.cancel()


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


# -- the load's process ----------------------------------------------------------------


class Load:
    """N simulated nodes on a few channels, each heartbeating and watching the hot node."""

    def __init__(self, channels: list[Any], hot: str, size: int) -> None:
        self.channels = channels
        self.hot = hot
        self.size = size
        self.seen: dict[str, set[int]] = {}

    async def node(self, index: int, *, task_status: Any) -> None:
        stub = curator_pb2_grpc.CuratorStub(self.channels[index % len(self.channels)])
        async with anyio.create_task_group() as tasks:
            await tasks.start(self._watch, stub, index)
            task_status.started()
            await anyio.sleep(random.random() * INTERVAL)
            tasks.start_soon(beat, stub, INTERVAL, None, None)

    async def _watch(self, stub: Any, index: int, *, task_status: Any) -> None:
        request = curator_pb2.WatchRequest(
            node_in_cluster=curator_pb2.WatchRequest.NodeInCluster(node_id=self.hot)
        )
        started = False
        async for event in stub.Watch(request):
            if not started:
                task_status.started()
                started = True
            for node in event.nodes:
                bench = node.roles.custom.get("bench")
                if bench is not None:
                    self._saw(bench.parameters["marker"], index)

    def _saw(self, marker: str, index: int) -> None:
        seen = self.seen.setdefault(marker, set())
        seen.add(index)
        if len(seen) == self.size:
            print(f"seen {marker} {time.time()}", flush=True)


async def load(directory: Path, endpoint: str, leader_id: str, hot: str, size: int) -> None:
    """Start ``size`` simulated nodes; print ``ready`` once each watches; run until killed."""
    async with contextlib.AsyncExitStack() as stack:
        channels = [
            await stack.enter_async_context(
                secure_channel(
                    endpoint,
                    NodeCredentials.load(directory / f"node{index}"),
                    node_id=leader_id,
                    options=[("grpc.max_concurrent_streams", 100_000)],
                )
            )
            for index in range(CHANNELS)
        ]
        simulated = Load(channels, hot, size)
        async with anyio.create_task_group() as tasks:
            for index in range(size):
                await tasks.start(simulated.node, index)
            print("ready", flush=True)
            await anyio.sleep_forever()


# -- this process: enrol, probe, change roles --------------------------------------------


class EchoCurator(curator_pb2_grpc.CuratorServicer):
    """Answers heartbeats at once, for the baseline."""

    @override
    async def Heartbeat(
        self, request_iterator: AsyncIterator[curator_pb2.HeartbeatRequest], context: Any
    ) -> AsyncIterator[curator_pb2.HeartbeatResponse]:
        async for _ in request_iterator:
            yield curator_pb2.HeartbeatResponse()


async def ping_pong_baseline(rounds: int) -> list[float]:
    """Insecure bidi ping-pong on one stream, in this process."""
    server = grpc.aio.server()
    curator_pb2_grpc.add_CuratorServicer_to_server(EchoCurator(), server)  # type: ignore[abstract]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    samples: list[float] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await beat(curator_pb2_grpc.CuratorStub(channel), 0.0, samples, rounds + 100)
    finally:
        await server.stop(None)
    return samples[100:]


async def fan_out(management: Any, hot: str, load_output: Line) -> float:
    """Seconds from a role change of the hot node until the load saw it on every watcher."""
    marker = f"m{random.random()}"
    change = management_pb2.UpdateNodeRolesRequest.Change(
        role="custom:bench", assign=True, parameters={"marker": marker}
    )
    start = time.time()
    await management.UpdateNodeRoles(
        management_pb2.UpdateNodeRolesRequest(node_id=hot, changes=[change])
    )
    while True:
        words = (await read_line(load_output)).split()
        if words[:2] == ["seen", marker]:
            return float(words[2]) - start


async def child(*arguments: str) -> anyio.abc.Process:
    """This program again, with ``arguments``."""
    return await anyio.open_process(
        [sys.executable, __file__, *arguments], stderr=subprocess.DEVNULL
    )


async def stop(process: anyio.abc.Process) -> None:
    process.send_signal(signal.SIGINT)
    with anyio.move_on_after(30):
        await process.wait()
    await process.aclose()


async def main(sizes: list[int]) -> None:
    """Start the curator's process, then load it at each size."""
    logging.getLogger("roleserve").propagate = False
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        server = await child("--serve", scratch)
        try:
            assert server.stdout is not None
            endpoint, leader_id = (await read_line(Line(server.stdout))).split()
            await measure(directory, server.pid, endpoint, leader_id, sizes)
        finally:
            await stop(server)


async def measure(
    directory: Path, pid: int, endpoint: str, leader_id: str, sizes: list[int]
) -> None:
    """Enrol the identities, then load the curator at each size."""
    owner = UserCredentials.load(directory / "owner")
    for index in range(CHANNELS + 1):
        address = ipaddress.ip_address(f"127.0.0.{100 + index}")
        credentials = await enrol_node(endpoint, leader_id, owner, generate_key(), address)
        credentials.save(directory / f"node{index}")
    hot = NodeCredentials.load(directory / "node0").node_id
    baseline = summarise(await ping_pong_baseline(2000))
    probe = NodeCredentials.load(directory / f"node{CHANNELS}")
    async with (
        secure_channel(endpoint, probe, node_id=leader_id) as probe_channel,
        secure_channel(endpoint, owner, node_id=leader_id) as management_channel,
    ):
        management = management_pb2_grpc.ManagementStub(management_channel)
        for size in sizes:
            arguments = [endpoint, leader_id, hot, str(size)]
            simulator = await child("--load", str(directory), *arguments)
            try:
                assert simulator.stdout is not None
                output = Line(simulator.stdout)
                while (await read_line(output)).strip() != "ready":
                    pass  # the previous size's marker, seen in the snapshot
                await anyio.sleep(INTERVAL)  # every simulated node has sent a heartbeat
                samples: list[float] = []
                cpu = cpu_seconds(pid), cpu_seconds(simulator.pid), time.perf_counter()
                stub = curator_pb2_grpc.CuratorStub(probe_channel)
                await beat(stub, PROBE_EVERY, samples, int(2 * INTERVAL / PROBE_EVERY))
                wall = time.perf_counter() - cpu[2]
                curator_cpu = (cpu_seconds(pid) - cpu[0]) / wall
                load_cpu = (cpu_seconds(simulator.pid) - cpu[1]) / wall
                fanned = await fan_out(management, hot, output)
            finally:
                await stop(simulator)
            print_comparison(
                f"N = {size:,}: the probe's heartbeat round trips over {2 * INTERVAL:.0f} s",
                summarise(samples),
                baseline,
                "insecure bidi ping-pong, one stream, no load",
            )
            print(f"  curator CPU   {100 * curator_cpu:.0f} % of one core")
            print(f"  load CPU      {100 * load_cpu:.0f} % of one core (the {size:,} nodes)")
            print(f"  fan-out       one role change to all {size:,} watchers in {fanned:.3f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--load", nargs=5, help=argparse.SUPPRESS)
    options = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        if options.serve:
            anyio.run(serve, Path(options.serve), backend="asyncio")
        elif options.load:
            directory, endpoint, leader_id, hot, size = options.load
            anyio.run(load, Path(directory), endpoint, leader_id, hot, int(size), backend="asyncio")
        else:
            anyio.run(main, options.sizes, backend="asyncio")
