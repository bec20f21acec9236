"""What an idle heartbeat costs gRPC's threads, with and without bandwidth probes (issue 30).

Run: ``./dev sync && .venv/bin/python benchmarks/grpc_idle.py [--seconds 60] [--interval 5]``.

Two client/server pairs of processes run side by side, each client beating on one
bidirectional stream every ``--interval`` seconds (a node's heartbeat: a small message, a
small reply) with a node's keepalive (a ping every 30 s): the baseline with gRPC's default
options, the other with ``rpc.FLOW_CONTROL_OPTIONS`` on both ends (no BDP probes). After a
warm-up, each process's CPU time and context switches over ``--seconds`` are read from
``/proc/PID/task/*`` (``schedstat``, ``status``), per thread name, and printed with the
ratio to the baseline's. Plain TCP: TLS would add the same to both pairs.

The context switches are the steadier figure on a busy machine: each one is a gRPC thread
woken (an event-engine worker, the poller, the timer thread, the lifeguard).

Then what the probes are for, bulk transfer: one ``--bulk`` MB answer (8 by default)
fetched 15 times over loopback from a server in this process, median seconds, with and
without probes (the window they grow matters for long round trips, which loopback lacks).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEEPALIVE = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
"""A node's keepalive to the curators (``connection.leader.NODE_KEEPALIVE_OPTIONS``)."""
WARM_UP = 20.0
"""Seconds before measuring: connected, a few beats exchanged."""


def _options(probes: bool) -> list[tuple[str, Any]]:
    from roleserve_core.rpc import FLOW_CONTROL_OPTIONS

    return [] if probes else list(FLOW_CONTROL_OPTIONS)


async def _serve(port: int, probes: bool) -> None:
    import grpc

    async def beat(requests: Any, context: Any) -> Any:
        async for _ in requests:
            yield b"ok"

    handler = grpc.method_handlers_generic_handler(
        "bench.Idle", {"Beat": grpc.stream_stream_rpc_method_handler(beat)}
    )
    server = grpc.aio.server(options=_options(probes))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def _beat(port: int, probes: bool, interval: float) -> None:
    import grpc

    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=KEEPALIVE + _options(probes))
    call: Any = channel.stream_stream("/bench.Idle/Beat")()
    while True:
        await call.write(b"beat")
        await call.read()
        await asyncio.sleep(interval)


async def _bulk(size: int, probes: bool, repeats: int = 15) -> float:
    """Median seconds to fetch one ``size``-byte answer over loopback."""
    import grpc

    async def answer(request: bytes, context: Any) -> bytes:
        return b"x" * size

    handler = grpc.method_handlers_generic_handler(
        "bench.Bulk", {"Get": grpc.unary_unary_rpc_method_handler(answer)}
    )
    unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    server = grpc.aio.server(options=unlimited + _options(probes))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=unlimited + _options(probes)
        ) as channel:
            get: Any = channel.unary_unary("/bench.Bulk/Get")
            await get(b"")
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                await get(b"")
                times.append(time.perf_counter() - start)
    finally:
        await server.stop(None)
    return sorted(times)[repeats // 2]


@dataclass(frozen=True)
class Threads:
    """CPU nanoseconds and context switches of one process, per thread name."""

    cpu_ns: dict[str, int]
    switches: dict[str, int]


def _threads(pid: int) -> Threads:
    cpu: dict[str, int] = defaultdict(int)
    switches: dict[str, int] = defaultdict(int)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            cpu[name] += int((task / "schedstat").read_text().split()[0])
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches" in line:
                    switches[name] += int(line.split()[1])
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return Threads(dict(cpu), dict(switches))


def _spawn(role: str, port: int, probes: bool, interval: float) -> subprocess.Popen[bytes]:
    flag = "--probes" if probes else "--no-probes"
    return subprocess.Popen(
        [sys.executable, __file__, f"--{role}", str(port), flag, "--interval", str(interval)],
        stderr=subprocess.DEVNULL,
    )


def main(seconds: float, interval: float, bulk_mb: float) -> None:
    pairs = {"gRPC defaults (baseline)": True, "FLOW_CONTROL_OPTIONS": False}
    processes: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
    try:
        for index, (name, probes) in enumerate(pairs.items()):
            port = 47600 + index
            processes[(name, "server")] = _spawn("server", port, probes, interval)
            time.sleep(1)
            processes[(name, "client")] = _spawn("client", port, probes, interval)
        print(
            f"warming up {WARM_UP:g} s, then measuring {seconds:g} s (a beat every {interval:g} s)"
        )
        time.sleep(WARM_UP)
        before = {key: _threads(process.pid) for key, process in processes.items()}
        time.sleep(seconds)
        after = {key: _threads(process.pid) for key, process in processes.items()}
    finally:
        for process in processes.values():
            process.kill()
            process.wait()
    totals: dict[tuple[str, str], tuple[float, float]] = {}
    for key in processes:
        cpu = {n: after[key].cpu_ns[n] - before[key].cpu_ns.get(n, 0) for n in after[key].cpu_ns}
        woken = {
            n: after[key].switches[n] - before[key].switches.get(n, 0) for n in after[key].switches
        }
        share = sum(cpu.values()) / 1e9 / seconds * 100
        rate = sum(woken.values()) / seconds
        totals[key] = (share, rate)
        print(f"{key[0]}, {key[1]}: {share:.4f}% of one core, {rate:.1f} context switches/s")
        for name in sorted(cpu, key=lambda n: -cpu[n]):
            thread_share = cpu[name] / 1e9 / seconds * 100
            print(f"    {name:<18}{thread_share:>9.4f}%{woken[name] / seconds:>8.1f}/s")
    baseline, measured = pairs
    for role in ("client", "server"):
        (base_share, base_rate), (share, rate) = totals[(baseline, role)], totals[(measured, role)]
        print(
            f"{role}: CPU {share / base_share:.2f}×, context switches {rate / base_rate:.2f}× "
            "the baseline's"
        )
    size = int(bulk_mb * 1e6)
    with_probes = asyncio.run(_bulk(size, probes=True))
    without = asyncio.run(_bulk(size, probes=False))
    print(
        f"bulk, {bulk_mb:g} MB over loopback: {without * 1e3:.1f} ms without probes, "
        f"{with_probes * 1e3:.1f} ms with (baseline): {without / with_probes:.2f}×"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between beats")
    parser.add_argument("--bulk", type=float, default=8.0, help="MB of the bulk answer")
    parser.add_argument("--server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--probes", action=argparse.BooleanOptionalAction, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.server is not None:
        asyncio.run(_serve(arguments.server, arguments.probes))
    elif arguments.client is not None:
        asyncio.run(_beat(arguments.client, arguments.probes, arguments.interval))
    else:
        main(arguments.seconds, arguments.interval, arguments.bulk)
