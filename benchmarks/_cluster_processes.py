"""The processes of a local cluster, by kind, and what they cost: RSS and CPU over a while.

A node's children are found through ``/proc`` (parent links), not the node's process
group: each program a node runs leads a process group of its own. A process is of the kind
its executable names (``prometheus-node-exporter`` is ``node_exporter``); the node itself
is ``node``, ``node (member)`` when it runs etcd, or ``node (leader)`` when its curator
leads (given by the caller: it serves every node's heartbeats, so its cost grows with the
cluster); the rest (kubelet, kube-apiserver, a
watchdog) by its name.

Run alone it measures a running cluster: ``.venv/bin/python
benchmarks/_cluster_processes.py --dir DIR [--seconds 60]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from _proc import status_value

from roleserve_core.localcluster import LocalCluster
from roleserve_core.process import read_stat, read_stats

__all__ = [
    "COUNTED",
    "LEADER_NODE",
    "MEMBER_NODE",
    "Cost",
    "cluster_processes",
    "costs",
    "counted_share",
    "descendants",
    "kind_of",
    "print_costs",
]

MEMBER_NODE = "node (member)"
"""A node that runs etcd (a consensus member, with the kube controllers): it does more."""
LEADER_NODE = "node (leader)"
"""The member whose curator leads: every node's heartbeats and Watch stream are its."""
COUNTED = ("node", MEMBER_NODE, LEADER_NODE, "etcd", "containerd", "node_exporter", "wireguard-go")
"""The kinds issue 30's idle goal counts (< 0.2% of one core per node, all together)."""
_RENAMED = {"prometheus-node-exporter": "node_exporter", "node_exporter": "node_exporter"}
_TICKS = os.sysconf("SC_CLK_TCK")


def descendants(roots: Iterable[int]) -> set[int]:
    """``roots`` and every process below them, by parent links."""
    children: dict[int, list[int]] = defaultdict(list)
    for stat in read_stats():
        children[stat.ppid].append(stat.pid)
    found: set[int] = set()
    waiting = list(roots)
    while waiting:
        pid = waiting.pop()
        if pid not in found:
            found.add(pid)
            waiting.extend(children.get(pid, ()))
    return found


def kind_of(pid: int, nodes: set[int]) -> str | None:
    """The kind of process ``pid`` is; None if it is gone."""
    if pid in nodes:
        return "node"
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return None
    name = Path(argv0.split()[0]).name if argv0 else ""
    return _RENAMED.get(name, name or "?")


def cluster_processes(node_pids: Iterable[int], leader: int | None = None) -> dict[str, list[int]]:
    """Every process of the cluster whose nodes are ``node_pids``, by kind; the nodes that
    run etcd are ``MEMBER_NODE``, but for ``leader`` (the leading curator's node process),
    which is ``LEADER_NODE``."""
    nodes = set(node_pids)
    kinds: dict[str, list[int]] = defaultdict(list)
    parents = {}
    for pid in descendants(nodes):
        kind = kind_of(pid, nodes)
        stat = read_stat(pid)
        if kind is not None and stat is not None:
            kinds[kind].append(pid)
            parents[pid] = stat.ppid
    members = {parents[pid] for pid in kinds.get("etcd", [])}
    kinds["node"] = [pid for pid in kinds.get("node", []) if pid not in members]
    kinds[MEMBER_NODE] = [pid for pid in nodes if pid in members and pid != leader]
    kinds[LEADER_NODE] = [pid for pid in nodes if pid == leader]
    return {kind: pids for kind, pids in kinds.items() if pids}


@dataclass(frozen=True)
class Cost:
    """What the processes of one kind cost together."""

    count: int
    rss_mib: float
    cpu_share: float
    """CPU used over the window, as a share of one core (0.01 is 1%)."""


def _rss_kib(pid: int) -> int:
    try:
        return status_value(pid, "VmRSS")
    except (OSError, LookupError):
        return 0


def _cpu_ticks(pids: Iterable[int]) -> dict[int, int]:
    ticks = {}
    for pid in pids:
        stat = read_stat(pid)
        if stat is not None:
            ticks[pid] = stat.utime + stat.stime
    return ticks


def costs(kinds: Mapping[str, list[int]], seconds: float) -> dict[str, Cost]:
    """RSS now and CPU over the next ``seconds``, per kind; a process that exits meanwhile
    counts for what it used before."""
    every = [pid for pids in kinds.values() for pid in pids]
    before = _cpu_ticks(every)
    start = time.monotonic()
    time.sleep(seconds)
    after = _cpu_ticks(every)
    elapsed = time.monotonic() - start
    result = {}
    for kind, pids in kinds.items():
        used = sum(after.get(pid, before.get(pid, 0)) - before.get(pid, 0) for pid in pids)
        rss = sum(_rss_kib(pid) for pid in pids) / 1024
        result[kind] = Cost(len(pids), rss, used / _TICKS / elapsed)
    return result


def print_costs(found: Mapping[str, Cost], nodes: int) -> None:
    """One line per kind: count, RSS and idle CPU, summed, per process, and shared out
    per node of the cluster; then the counted kinds' total per node."""
    print(f"  {'kind':<24}{'count':>6}{'RSS MiB':>9}{'each':>7}{'CPU %':>8}{'each':>7}{'/node':>7}")
    for kind, cost in sorted(found.items(), key=lambda item: -item[1].cpu_share):
        cpu = cost.cpu_share * 100
        print(
            f"  {kind:<24}{cost.count:>6}{cost.rss_mib:>9.1f}{cost.rss_mib / cost.count:>7.1f}"
            f"{cpu:>8.2f}{cpu / cost.count:>7.3f}{cpu / nodes:>7.3f}"
        )
    share = counted_share(found) * 100 / nodes
    print(f"  counted ({', '.join(COUNTED)}): {share:.3f}% of one core per node")


def counted_share(found: Mapping[str, Cost]) -> float:
    """The CPU share of the kinds issue 30 counts, together."""
    return sum(found[kind].cpu_share for kind in COUNTED if kind in found)


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="the cluster's directory")
    parser.add_argument("--seconds", type=float, default=60.0)
    arguments = parser.parse_args()
    cluster = LocalCluster.existing(arguments.dir)
    pids = [node.pid for node in cluster.nodes if node.pid is not None]
    print_costs(costs(cluster_processes(pids), arguments.seconds), len(pids))


if __name__ == "__main__":
    _main()
