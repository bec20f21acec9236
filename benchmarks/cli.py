"""How fast the ``roleserve`` command answers: the commands an operator types most.

Run: ``./dev sync && .venv/bin/python benchmarks/cli.py [--runs 20] [--nodes 3]``.

Each command runs ``--runs`` times as a fresh process (``python -m roleserve_core ...``, as
the installed ``roleserve`` script runs it), timed from ``exec`` to exit:

- ``roleserve --version``
- ``roleserve ctl --help``
- ``roleserve plugins`` (loads every installed plugin's hook module)
- ``roleserve ctl nodes`` against a running local cluster of ``--nodes`` nodes (a real
  mutual-TLS call to the leading curator; the cluster is brought up once, detached, in a
  directory of its own on a random 127.X.Y.11, and stopped at the end)

Baselines, in the same run: ``python -c pass`` (the interpreter alone) and
``python -c 'import grpc'`` (the least a command that talks to a cluster must import).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
from _report import Summary, print_comparison, summarise

from roleserve_core.localcluster import LocalCluster


def timed(command: Sequence[str], runs: int, env: dict[str, str] | None = None) -> Summary:
    """Seconds from exec to exit of ``command``, ``runs`` times; it must succeed."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True, env=env)
        samples.append(time.perf_counter() - start)
    return summarise(samples)


def roleserve(*arguments: str) -> list[str]:
    """The command line of ``roleserve ARGUMENTS`` in this interpreter."""
    return [sys.executable, "-m", "roleserve_core", *arguments]


def compare(title: str, measured: Summary, baselines: dict[str, Summary]) -> None:
    """Print ``measured`` against every baseline."""
    for name, baseline in baselines.items():
        print_comparison(f"{title} vs {name}", measured, baseline, name)


async def with_cluster(size: int, work: Callable[[LocalCluster], None]) -> None:
    """Bring a local cluster up in a temporary directory, run ``work(cluster)``, stop it."""
    first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
    with tempfile.TemporaryDirectory(prefix="roleserve-cli-bench-") as directory:
        cluster = LocalCluster(Path(directory), size, first_address=first)
        try:
            print(f"bringing up {size} nodes from {first} ...", file=sys.stderr)
            await cluster.up()
            await anyio.to_thread.run_sync(work, cluster)
        finally:
            with anyio.CancelScope(shield=True):
                await cluster.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()

    baselines = {
        "python -c pass": timed([sys.executable, "-c", "pass"], args.runs),
        "python -c 'import grpc'": timed([sys.executable, "-c", "import grpc"], args.runs),
    }
    compare("roleserve --version", timed(roleserve("--version"), args.runs), baselines)
    compare("roleserve ctl --help", timed(roleserve("ctl", "--help"), args.runs), baselines)
    compare("roleserve plugins", timed(roleserve("plugins"), args.runs), baselines)

    def ctl_nodes(cluster: LocalCluster) -> None:
        env = {**os.environ, "ROLESERVE_CREDENTIALS": str(cluster.owner_directory)}
        compare("roleserve ctl nodes", timed(roleserve("ctl", "nodes"), args.runs, env), baselines)

    anyio.run(with_cluster, args.nodes, ctl_nodes)


if __name__ == "__main__":
    main()
