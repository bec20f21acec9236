"""The operator's soak: a cluster of real node processes under a churn of role changes, and
what etcd keeps once the churn is over.

Run: ``./dev sync && .venv/bin/python benchmarks/soak.py [--changes 5000] [--rate 7]``.

``LocalCluster`` (what ``roleserve cluster up`` runs) of three nodes, each a consensus
member, with the installed plugins and a history retention of ``--retention`` seconds set
at bootstrap (60; the default is 300, which only makes the wait longer). Then ``--changes``
role changes (a parameter of the custom role ``churn`` of node 2) through the leader's
``Management``, ``--rate`` a second (0: as fast as they are answered), as an operator's
tooling would make them. Each etcd member's RSS, database file, threads and open files are
measured at start (the baseline; the ratios are to it), after the churn, and once the
leading curator's maintenance has had a retention and three of its periods to compact the
churn's history away and defragment the members (real time). Also the median and p99 of
the first and the last thousand changes.
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
from _proc import open_files, status_value
from _report import print_comparison, summarise

from roleserve_core import read_record
from roleserve_core.localcluster import LocalCluster
from roleserve_core.proto import management_pb2

MEMBERS = 3
ETCD_RECORD = "etcd.process.json"
"""The program runner's record of a node's etcd (``<state_dir>/<name>.process.json``)."""


@dataclass(frozen=True)
class Member:
    """One node's etcd process, found by its data directory."""

    node: int
    pid: int
    data_dir: Path


@dataclass(frozen=True)
class Figures:
    """One member's RSS and database file (bytes), threads and open files."""

    rss: int
    database: int
    threads: int
    files: int


def find_members(cluster: LocalCluster) -> list[Member]:
    """The etcd processes of ``cluster``, by node: from the record the program runner keeps
    in each member's directory, beside etcd's data."""
    members = []
    for node in cluster.nodes:
        for path in node.directory.rglob(ETCD_RECORD):
            members.append(Member(node.index, read_record(path).pid, path.parent / "data"))
    return members


def figures(member: Member) -> Figures:
    return Figures(
        rss=status_value(member.pid, "VmRSS") * 1024,
        database=(member.data_dir / "member" / "snap" / "db").stat().st_size,
        threads=status_value(member.pid, "Threads"),
        files=open_files(member.pid),
    )


def print_figures(title: str, members: list[Member], start: list[Figures]) -> None:
    """One line per member: its figures now, and their ratios to ``start``."""
    print(title)
    now = [figures(member) for member in members]
    for member, (current, then) in zip(members, zip(now, start, strict=True), strict=True):
        print(
            f"  node {member.node}   RSS {current.rss / 2**20:5.1f} MiB "
            f"({current.rss / then.rss:4.2f}x)   database {current.database / 1e6:5.2f} MB "
            f"({current.database / then.database:4.2f}x)   threads {current.threads} "
            f"(start {then.threads})   open files {current.files} (start {then.files})"
        )


def defragmentations(directory: Path) -> int:
    """How many defragmentations the nodes' logs tell of (the leading curator logs one line
    per member it defragments)."""
    return sum(
        log.read_text(errors="replace").count("defragmented etcd member")
        for log in directory.glob("n*/node.log*")
    )


async def churn(cluster: LocalCluster, changes: int, rate: float) -> list[float]:
    """``changes`` role changes of node 2, ``rate`` a second; each one's seconds."""
    node_id = cluster.node_id(cluster.nodes[1])
    assert node_id is not None
    samples: list[float] = []
    began = time.monotonic()
    async with cluster.management() as management:
        for index in range(changes):
            if rate > 0:
                await anyio.sleep(max(0.0, began + index / rate - time.monotonic()))
            change = management_pb2.UpdateNodeRolesRequest.Change(
                role="custom:churn", assign=True, parameters={"n": str(index)}
            )
            started = time.perf_counter()
            await management.UpdateNodeRoles(
                management_pb2.UpdateNodeRolesRequest(node_id=node_id, changes=[change])
            )
            samples.append(time.perf_counter() - started)
            if (index + 1) % 1000 == 0:
                print(f"  {index + 1} changes in {time.monotonic() - began:.0f} s", flush=True)
    return samples


async def main(changes: int, rate: float, retention: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
        config = f"[plugins.controlplane]\nhistory_retention = {retention}\n"
        cluster = LocalCluster(Path(scratch), MEMBERS, first_address=first, config=config)
        try:
            await cluster.up()
            members = find_members(cluster)
            assert len(members) == MEMBERS, f"found etcd members {members}"
            start = [figures(member) for member in members]
            print_figures("at start: a cluster up of three members", members, start)
            samples = await churn(cluster, changes, rate)
            print_figures(f"after {changes} role changes", members, start)
            during = defragmentations(cluster.directory)
            # History is compacted a retention and up to two periods after the churn; the
            # size in use shows the freed pages at the next pass, which defragments.
            wait = retention * 1.25 + 3 * retention / 4
            print(f"  waiting {wait:.0f} s: a retention and three maintenance periods")
            await anyio.sleep(wait)
            print_figures("after the retention: compacted, defragmented", members, start)
            after = defragmentations(cluster.directory) - during
            print(f"  defragmentations: {during} during the churn, {after} after it")
            thousand = min(1000, len(samples))
            print_comparison(
                f"a role change, the last {thousand}",
                summarise(samples[-thousand:]),
                summarise(samples[:thousand]),
                f"the first {thousand}",
            )
        finally:
            await cluster.down()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=7.0, help="changes a second; 0: no limit")
    parser.add_argument("--retention", type=int, default=60, help="history_retention, s")
    options = parser.parse_args()
    anyio.run(main, options.changes, options.rate, options.retention)
