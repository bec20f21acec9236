"""Failover of the leading curator: a hung leader (SIGSTOP), a crashed one (SIGKILL) and one
stopped cleanly (SIGTERM).

Run: ``./dev sync && .venv/bin/python benchmarks/failover.py [--sizes 3 20] [--ttl 3]
[--runs 3] [--kubernetes-workers K|all]``.

For each size, one local cluster of real node processes (``LocalCluster``; three consensus
members, the rest plain nodes; ``kubernetes_worker`` on as many as ``cluster up`` gives it,
or ``--kubernetes-workers``) with an election lease of ``--ttl`` seconds. Its leader's
process group is stopped with SIGSTOP, as a stalled disk or a paused VM does, then
resumed; once the cluster is whole again, the leader is killed with SIGKILL, then started
again; then the leader's node process is stopped with SIGTERM (as ``cluster down`` and
systemd do), then started again; ``--runs`` times. From each signal, two times
(``_failover``): until every survivor is HEALTHY at a new leader, and until a role set on a
survivor reaches it. The baseline is the lease TTL: a new leader cannot be elected before
the old lease of a hung or crashed leader runs out, so 1× is their floor and the issue's
goal is 1.5×; a leader stopped cleanly revokes its lease, so its successor owes nothing to
the TTL.
"""

from __future__ import annotations

import os

# Before grpc loads (it reads this once): no C-core 'Got goaway' lines at each failover.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import argparse
import signal
import tempfile
from pathlib import Path

import anyio
from _failover import (
    Samples,
    add_cluster_options,
    fault_and_recover,
    print_failover,
    random_first_address,
)

from roleserve_core.localcluster import LocalCluster
from roleserve_core.localcluster.cluster import KubernetesWorkers


async def one_size(
    size: int, ttl: int, runs: int, keep: Path | None, workers: KubernetesWorkers
) -> Samples:
    samples: Samples = {}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) if keep is None else keep / f"cluster-{size}"
        first = random_first_address()
        config = f"[plugins.controlplane]\nlease_ttl = {ttl}\n"
        cluster = LocalCluster(
            directory, size, first_address=first, config=config, kubernetes_workers=workers
        )
        try:
            print(f"{size} nodes ({cluster.workers} Kubernetes workers): starting", flush=True)
            await cluster.up()
            for _ in range(runs):
                await fault_and_recover(cluster, signal.SIGSTOP, samples)
                await fault_and_recover(cluster, signal.SIGKILL, samples)
                await fault_and_recover(cluster, signal.SIGTERM, samples)
        finally:
            await cluster.down()
    return samples


async def main(
    sizes: list[int], ttl: int, runs: int, keep: Path | None, workers: KubernetesWorkers
) -> None:
    for size in sizes:
        print_failover(size, await one_size(size, ttl, runs, keep, workers), float(ttl))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 20])
    parser.add_argument("--ttl", type=int, default=3, help="election lease TTL, seconds")
    parser.add_argument("--runs", type=int, default=3, help="faults of each kind per size")
    add_cluster_options(parser)
    arguments = parser.parse_args()
    anyio.run(
        main,
        arguments.sizes,
        arguments.ttl,
        arguments.runs,
        arguments.keep,
        arguments.kubernetes_workers,
    )
