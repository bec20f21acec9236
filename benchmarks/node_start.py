"""Node start-up: from process start to the root runnable healthy, and the memory it takes.

Run: ``./dev sync && .venv/bin/python benchmarks/node_start.py [--runs 20]``.

With every plugin of the workspace installed (the node loads them all), a one-node cluster
is bootstrapped once; then its node process is started ``--runs`` times on that data
directory (it rejoins with its saved credentials) and each time measured:

- time from ``exec`` to the line ``node running`` on its log (the root runnable is
  healthy: plugins loaded, the runtime assembled, every worker started);
- the process's resident memory (VmRSS) at that moment, and 5 s later (its workers busy:
  etcd member started, curator elected, heartbeats flowing; etcd's own memory is not
  counted, it is another process).

Baselines, in the same run: ``python -c pass`` and ``python -c 'import grpc'``, timed from
``exec`` to exit, with their VmRSS at exit.
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio
from _proc import status_value
from _report import print_comparison, summarise

from roleserve_core.localcluster import LocalCluster

SETTLE = 5.0
"""Seconds after ``node running`` at which the second RSS is read."""


def baseline(code: str, runs: int) -> tuple[list[float], list[int]]:
    """``python -c code`` runs: seconds to exit, and VmRSS (KiB) just before exit."""
    probe = (
        f"{code}\nimport pathlib\n"
        "print([l for l in pathlib.Path('/proc/self/status').read_text().splitlines() "
        "if l.startswith('VmRSS:')][0].split()[1])"
    )
    times, sizes = [], []
    for _ in range(runs):
        start = time.perf_counter()
        output = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        )
        times.append(time.perf_counter() - start)
        sizes.append(int(output.stdout.split()[-1]))
    return times, sizes


def watch_log(process: subprocess.Popen[str], running: threading.Event) -> None:
    """Read the node's log until it ends (a full pipe would stall the node); set ``running``
    at the line that says the root runnable is healthy."""
    assert process.stderr is not None
    for line in process.stderr:
        if "node running" in line:
            running.set()


def start_once(node_dir: Path, address: str) -> tuple[float, int, int]:
    """One start of the node: seconds to ``node running``, RSS then, RSS after SETTLE."""
    command = [
        sys.executable,
        "-m",
        "roleserve_core",
        "node",
        "run",
        "--data-dir",
        str(node_dir),
        "--address",
        address,
    ]
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    running = threading.Event()
    drain = threading.Thread(target=watch_log, args=(process, running), daemon=True)
    drain.start()
    try:
        while not running.wait(0.001):
            if process.poll() is not None:
                raise RuntimeError(f"the node exited with {process.returncode} before it ran")
        elapsed = time.perf_counter() - start
        first = status_value(process.pid, "VmRSS")
        time.sleep(SETTLE)  # the measurement itself: memory once the workers are busy
        settled = status_value(process.pid, "VmRSS")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        drain.join()
    return elapsed, first, settled


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
        cluster = LocalCluster(Path(scratch), 1, first_address=first)
        anyio.run(cluster.up)
        anyio.run(cluster.down)
        node = cluster.nodes[0]
        measured = [start_once(node.directory, str(node.address)) for _ in range(runs)]
    bare_times, bare_sizes = baseline("pass", runs)
    grpc_times, grpc_sizes = baseline("import grpc", runs)
    times = [m[0] for m in measured]
    print_comparison(
        f"process start to root healthy, {runs} starts",
        summarise(times),
        summarise(bare_times),
        "python -c pass",
    )
    print_comparison(
        "the same, against importing grpc",
        summarise(times),
        summarise(grpc_times),
        "python -c 'import grpc'",
    )
    at_start = summarise([m[1] for m in measured])
    settled = summarise([m[2] for m in measured])
    bare, grpc_only = summarise(bare_sizes), summarise(grpc_sizes)
    print("resident memory (VmRSS, median)")
    rows = [
        ("node at root healthy", at_start, None),
        (f"node {SETTLE:g} s later", settled, None),
        ("python -c pass", bare, settled.median / bare.median),
        ("python -c 'import grpc'", grpc_only, settled.median / grpc_only.median),
    ]
    for name, size, ratio in rows:
        note = f"   (the settled node is {ratio:.1f}× this)" if ratio else ""
        print(f"  {name:<24} {size.median / 1024:7.1f} MiB{note}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    main(parser.parse_args().runs)
