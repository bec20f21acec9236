"""The leading curator's reads under load: GetNodes while 200 Watch streams of every node
are open and 50 other clients call GetNodes in loops, against GetNodes on the idle curator.

Run: ``./dev sync && .venv/bin/python benchmarks/curator_reads.py [--watches 200 --loops 50]``.

Three processes, as ``curator_load.py`` has them (and it serves the curator: its
``--serve``), so that the load's CPU does not slow the probe:

- the curator (with its etcd) and 3 enrolled nodes;
- the load: ``--watches`` streams ``Watch(nodes_in_cluster)`` over the nodes' channels
  (each holds the whole cluster, as a node's hostsfile or clusternet does), each read past
  its first snapshot, and ``--loops`` tasks calling ``Management.GetNodes`` one after another
  with the owner's credentials (as ``ctl nodes --watch`` or a dashboard would);
- this process, the probe: sequential ``GetNodes`` with the owner's credentials, timed.

Measured from outside before this benchmark (issue "Security"): GetNodes median 7.7 ms,
p90 52 ms, max 170 ms on 3 nodes under such a load. Baseline, in the same run: the same
probe on the same curator before the load starts.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _proc import cpu_seconds
from _report import print_comparison, summarise
from curator_load import Line, read_line, stop

from roleserve_controlplane.testing import enrol_node
from roleserve_core.identity import NodeCredentials, UserCredentials, generate_key
from roleserve_core.proto import curator_pb2, curator_pb2_grpc, management_pb2, management_pb2_grpc
from roleserve_core.rpc import secure_channel

CHANNELS = 8
"""Channels the load's watches share (each one of the NODES nodes' identities)."""
NODES = 3
"""Nodes enrolled besides the curator's own: GetNodes answers with NODES + 1."""
PROBES = 500
"""Sequential GetNodes calls the probe times, idle and loaded."""
SETTLE = 2.0
"""Seconds the load runs before the probe starts, so that it measures a steady state."""

CURATOR_LOAD = str(Path(__file__).resolve().parent / "curator_load.py")


async def get_nodes(management: Any) -> int:
    """One whole GetNodes answer; the number of nodes in it."""
    return len([node async for node in management.GetNodes(management_pb2.GetNodesRequest())])


async def probe(management: Any, calls: int) -> list[float]:
    """Seconds of each of ``calls`` sequential GetNodes."""
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await get_nodes(management)
        samples.append(time.perf_counter() - start)
    return samples


# -- the load's process ----------------------------------------------------------------


async def watch(stub: Any, *, task_status: Any) -> None:
    """One Watch of every node, started once its first snapshot is read; then drained."""
    request = curator_pb2.WatchRequest(nodes_in_cluster=curator_pb2.WatchRequest.NodesInCluster())
    started = False
    async for event in stub.Watch(request):
        if not started and event.progress == curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED:
            task_status.started()
            started = True


async def loop_get_nodes(management: Any) -> None:
    """GetNodes, one after another, until cancelled."""
    while True:
        await get_nodes(management)


async def load(directory: Path, endpoint: str, leader_id: str, watches: int, loops: int) -> None:
    """Open the watches, start the loops, print ``ready``; run until killed."""
    owner = UserCredentials.load(directory / "owner")
    async with contextlib.AsyncExitStack() as stack:
        channels = [
            await stack.enter_async_context(
                secure_channel(
                    endpoint,
                    NodeCredentials.load(directory / f"node{index % NODES}"),
                    node_id=leader_id,
                )
            )
            for index in range(CHANNELS)
        ]
        management_channel = await stack.enter_async_context(
            secure_channel(endpoint, owner, node_id=leader_id)
        )
        management = management_pb2_grpc.ManagementStub(management_channel)
        async with anyio.create_task_group() as tasks:
            for index in range(watches):
                stub = curator_pb2_grpc.CuratorStub(channels[index % len(channels)])
                await tasks.start(watch, stub)
            for _ in range(loops):
                tasks.start_soon(loop_get_nodes, management)
            print("ready", flush=True)
            await anyio.sleep_forever()


# -- this process: enrol, probe idle, load, probe loaded -----------------------------------


async def main(watches: int, loops: int) -> None:
    """Start the curator's process, enrol the nodes, probe it idle and loaded."""
    logging.getLogger("roleserve").propagate = False
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        server = await anyio.open_process(
            [sys.executable, CURATOR_LOAD, "--serve", scratch], stderr=subprocess.DEVNULL
        )
        try:
            assert server.stdout is not None
            endpoint, leader_id = (await read_line(Line(server.stdout))).split()
            await measure(directory, server.pid, endpoint, leader_id, watches, loops)
        finally:
            await stop(server)


async def measure(
    directory: Path, pid: int, endpoint: str, leader_id: str, watches: int, loops: int
) -> None:
    owner = UserCredentials.load(directory / "owner")
    for index in range(NODES):
        address = ipaddress.ip_address(f"127.0.0.{100 + index}")
        credentials = await enrol_node(endpoint, leader_id, owner, generate_key(), address)
        credentials.save(directory / f"node{index}")
    async with secure_channel(endpoint, owner, node_id=leader_id) as channel:
        management = management_pb2_grpc.ManagementStub(channel)
        assert await get_nodes(management) == NODES + 1
        await probe(management, 50)  # warm the channel and the curator's code paths
        before = cpu_seconds(pid)
        idle = summarise(await probe(management, PROBES))
        per_call = (cpu_seconds(pid) - before) / PROBES
        arguments = [str(directory), endpoint, leader_id, str(watches), str(loops)]
        loader = await anyio.open_process(
            [sys.executable, __file__, "--load", *arguments], stderr=subprocess.DEVNULL
        )
        try:
            assert loader.stdout is not None
            while (await read_line(Line(loader.stdout))).strip() != "ready":
                pass
            await anyio.sleep(SETTLE)
            before, started = cpu_seconds(pid), time.perf_counter()
            samples = await probe(management, PROBES)
            curator_cpu = (cpu_seconds(pid) - before) / (time.perf_counter() - started)
        finally:
            await stop(loader)
    loaded = summarise(samples)
    print_comparison(
        f"GetNodes ({NODES + 1} nodes) under {watches} Watch streams of every node "
        f"and {loops} GetNodes loops",
        loaded,
        idle,
        "GetNodes on the idle curator",
    )
    print(f"  max         {1e3 * max(samples):.1f} ms")
    print(f"  curator CPU {100 * curator_cpu:.0f} % of one core while loaded")
    print(f"  curator CPU {1e3 * per_call:.2f} ms per GetNodes, idle (the loaded median is about")
    print(f"              {loops + 1} callers × this, when the curator's one core is saturated)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watches", type=int, default=200)
    parser.add_argument("--loops", type=int, default=50)
    parser.add_argument("--load", nargs=5, help=argparse.SUPPRESS)
    options = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        if options.load:
            directory, endpoint, leader_id, watches, loops = options.load
            anyio.run(
                load,
                Path(directory),
                endpoint,
                leader_id,
                int(watches),
                int(loops),
                backend="asyncio",
            )
        else:
            anyio.run(main, options.watches, options.loops, backend="asyncio")
