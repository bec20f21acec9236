"""A local cluster of 10 to 100 nodes: up, idle cost, failover, down (issue 30).

Run: ``./dev sync && .venv/bin/python benchmarks/scale.py [--sizes 10 50 100] [--idle 60]
[--netns] [--kubernetes-workers K|all]`` (on a quiet machine: it starts every size's whole
cluster).

For each size, in one run, through the command line a user types:

- ``roleserve cluster up --nodes N --detach [--kubernetes-workers K]``, timed until it
  returns (every node UP and HEALTHY, the Node of every ``kubernetes_worker`` Ready), then
  checked at the leader; without ``--kubernetes-workers``, ``cluster up``'s default (every
  node up to 10 nodes, 10 above), so that 100 nodes measure the role server with ten
  kubelets, and ``--kubernetes-workers all`` the cluster with one kubelet a node;
- RSS and CPU over ``--idle`` seconds of the idle cluster, per kind of process (node,
  member and leading node apart, etcd, containerd, node_exporter, wireguard-go, and the
  rest by name), summed and per node (``_cluster_processes``);
- the leader's node process SIGKILLed, then SIGSTOPped: each timed until every survivor is
  HEALTHY at the new leader, and until a role set after the failover reaches its node
  (``_failover``);
- ``roleserve cluster down``, timed, then checked that no process of the cluster is left.

The report says how many nodes were Kubernetes workers and how many kubelets ran (the
issue's counted kinds leave kubelets out; their cost is on their own line).

The baseline, in the same run, is the election lease TTL the cluster runs with (a new
leader cannot be elected before the old lease runs out): failover's goal is 1.5× it. The
other goals are absolute and printed beside each figure: up < 120 s, idle < 0.2% of one
core per node (the counted kinds together), down < 20 s.

Each Kubernetes worker runs kubelet and containerd, and uses inotify instances (kubelet six,
containerd one): ``fs.inotify.max_user_instances`` (128 by default) is checked first and
named when a size needs more, since containerd's CRI and the kubelet fail without one.
"""

from __future__ import annotations

import os

# Before grpc loads (it reads this once): no C-core 'Got goaway' lines at each failover.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from _cluster_processes import cluster_processes, costs, counted_share, descendants, print_costs
from _failover import (
    Samples,
    add_cluster_options,
    fault_and_recover,
    nodes_at_leader,
    print_failover,
    random_first_address,
    whole_again,
)

from roleserve_core.localcluster import LocalCluster, workers_for_up
from roleserve_core.localcluster.cluster import KubernetesWorkers
from roleserve_core.process import read_stat

UP_GOAL = 120.0
IDLE_GOAL = 0.002
"""Of one core, per node, the counted kinds together."""
DOWN_GOAL = 20.0
FAILOVER_GOAL = 1.5
"""Times the lease TTL."""
INOTIFY_PER_WORKER = 7
"""inotify instances one Kubernetes worker's programs hold (kubelet 6, containerd 1), as
counted on a local cluster; the controllers add a few more per consensus member."""
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def roleserve(*argv: str) -> float:
    """Run ``roleserve ARGV`` to its end; its seconds. Its output goes to this one's."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "roleserve_core", *argv], check=True)
    return time.perf_counter() - start


def lease_ttl() -> float:
    """The election lease TTL a cluster runs with by default, as ``roleserve plugins``
    tells (importing the controlplane plugin here would find ``benchmarks/etcd.py`` as
    etcd3aio's ``etcd``)."""
    listing = subprocess.run(
        [sys.executable, "-m", "roleserve_core", "plugins", "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for plugin in json.loads(listing):
        for setting in plugin.get("settings", []):
            if setting["name"] == "lease_ttl":
                return float(setting["default"])
    raise LookupError("no plugin declares lease_ttl: is roleserve-controlplane installed?")


def goal(title: str, value: float, limit: float, unit: str) -> None:
    verdict = "meets" if value < limit else "MISSES"
    print(f"{title}: {value:.2f} {unit} ({verdict} the goal < {limit:g} {unit})", flush=True)


def inotify_in_use() -> int:
    """inotify instances held now, by every user (the limit is per user; root runs all)."""
    count = 0
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            count += sum(1 for fd in fd_dir.iterdir() if os.readlink(fd) == "anon_inode:inotify")
        except OSError:
            continue
    return count


def check_inotify(workers: int) -> None:
    limit = int(INOTIFY_LIMIT.read_text())
    needed = inotify_in_use() + workers * INOTIFY_PER_WORKER
    print(f"inotify instances: {inotify_in_use()} in use, ~{needed} needed, limit {limit}")
    if needed > limit:
        print(
            f"  {workers} Kubernetes workers need more inotify instances than "
            f"{INOTIFY_LIMIT} allows: "
            f"sysctl fs.inotify.max_user_instances={needed * 2}",
            flush=True,
        )


async def leader_pid(cluster: LocalCluster) -> int | None:
    """The node process whose curator leads (its idle cost grows with the cluster)."""
    leader, _ = await nodes_at_leader(cluster, list(cluster.nodes))
    return next((node.pid for node in cluster.nodes if cluster.node_id(node) == leader), None)


def leftovers(before: dict[int, int]) -> list[int]:
    """Which of ``before`` (pid: start time) still run, zombies aside."""
    left = []
    for pid, started in before.items():
        stat = read_stat(pid)
        if stat is not None and stat.start_time == started and stat.state != "Z":
            left.append(pid)
    return left


async def one_size(
    size: int, idle: float, netns: bool, keep: Path | None, asked: KubernetesWorkers
) -> Samples:
    samples: Samples = {}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) if keep is None else keep / f"cluster-{size}"
        where = ["--netns"] if netns else ["--first-address", str(random_first_address())]
        if asked is not None:
            where += ["--kubernetes-workers", str(asked)]
        workers = workers_for_up(asked, size)
        check_inotify(workers)
        print(f"{size} nodes: cluster up, {workers} of them Kubernetes workers", flush=True)
        command = ["cluster", "up", "--nodes", str(size), "--detach", "--dir", str(directory)]
        try:
            up = roleserve(*command, *where)
            cluster = LocalCluster.existing(directory)
            await whole_again(cluster)
            goal(f"{size} nodes: up until every node is HEALTHY", up, UP_GOAL, "s")
            pids = [node.pid for node in cluster.nodes if node.pid is not None]
            print(f"{size} nodes idle for {idle:g} s:", flush=True)
            found = costs(cluster_processes(pids, await leader_pid(cluster)), idle)
            print_costs(found, size)
            kubelets = found["kubelet"].count if "kubelet" in found else 0
            short = "" if kubelets == workers else " (NOT one each: the figures do not hold)"
            print(
                f"{size} nodes: Kubernetes workers {workers}, kubelets that ran {kubelets}{short}",
                flush=True,
            )
            per_node = counted_share(found) / size * 100
            goal(f"{size} nodes: idle CPU per node", per_node, IDLE_GOAL * 100, "%")
            for fault in (signal.SIGKILL, signal.SIGSTOP):
                await fault_and_recover(cluster, fault, samples)
        finally:
            every = [node.pid for node in LocalCluster.existing(directory).nodes]
            running = descendants(pid for pid in every if pid is not None)
            started = {pid: stat.start_time for pid in running if (stat := read_stat(pid))}
            down = roleserve("cluster", "down", "--dir", str(directory))
            left = leftovers(started)
            goal(f"{size} nodes: down", down, DOWN_GOAL, "s")
            print(f"{size} nodes: {len(left)} of {len(started)} processes left after down {left}")
    return samples


async def main(
    sizes: list[int], idle: float, netns: bool, keep: Path | None, workers: KubernetesWorkers
) -> None:
    ttl = lease_ttl()
    print(f"baseline: the election lease TTL, {ttl:g} s (failover goal ≤ {FAILOVER_GOAL}×)")
    for size in sizes:
        print_failover(size, await one_size(size, idle, netns, keep, workers), ttl)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle measured")
    parser.add_argument("--netns", action="store_true", help="each node in its own namespace")
    add_cluster_options(parser)
    arguments = parser.parse_args()
    anyio.run(
        main,
        arguments.sizes,
        arguments.idle,
        arguments.netns,
        arguments.keep,
        arguments.kubernetes_workers,
    )
