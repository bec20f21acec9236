"""A node's weight by its roles: the RSS of a real node process for each role it holds.

Run: ``./dev sync && .venv/bin/python benchmarks/node_weight.py [--samples 5]``.

With every plugin of the workspace installed, as in a local cluster: a 2-node
``LocalCluster`` (node 1 bootstraps it and holds the roles ``cluster up`` gives it:
consensus_member, kubernetes_controller, kubernetes_worker). Node 2 is then given each set
of roles below in turn (``UpdateNodeRoles``, as ``roleserve ctl roles set`` does), restarted
so that a fresh process loads only what those roles need, and measured once it reports UP
and HEALTHY with them (and ``SETTLE`` seconds more, its workers busy): its VmRSS, the median
of ``--samples`` readings a second apart. The node process alone: etcd, containerd and the
other programs it runs are processes of their own. kubernetes_controller needs
consensus_member (the curator refuses it alone), so the controller's own cost is the
difference between those two lines.

Also, with nothing running: what the node process imports before any worker starts (the
core's daemon and every installed plugin's hook module, as ``roleserve node run`` loads
them), timed from ``exec`` to exit, with its VmRSS.

Baselines, in the same run: ``python -c pass`` and ``python -c 'import grpc'``, with their
VmRSS just before exit. The goal (issue 30): a node with only kubernetes_worker ≤ 60 MiB.
Figures taken while other work shares the machine are noisy; the ratios to the baselines
are the figures to compare. ``--env NAME=VALUE`` starts node 2 with a variable added (to
try a tuning of the process, e.g. ``MALLOC_ARENA_MAX=2``).

Each node's reading also splits its memory: anonymous (the interpreter's heap, threads'
stacks, malloc's arenas) and file pages (the shared libraries' code: grpc's,
cryptography's, which every node of a machine shares: its PSS counts a share of them),
with its threads and malloc arenas.

Bytecode: where ``PYTHONDONTWRITEBYTECODE`` is set and nothing was cached (this machine:
uv installs no bytecode), every process compiles each module it imports at each start.
``--cache-bytecode`` caches it in the run's directory (``PYTHONPYCACHEPREFIX``), as an
installed node has it, for every process of the run (each baseline runs once more first
to fill it; node 1, which holds every role, fills it for node 2). It lowers the baselines
(``import grpc`` ~6 MiB) and the import of the plugins (~4 MiB), not a running node
(issue 30: the node's ``malloc_trim`` returns the compiler's garbage), so the ratios
of a run with it do not compare with one without.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import anyio
from _proc import malloc_arenas, smaps_rollup, status_value
from _report import print_comparison, summarise
from node_start import baseline

from roleserve_core import roles_from_proto
from roleserve_core.localcluster import LocalCluster, LocalNode
from roleserve_core.proto import management_pb2

ROLE_SETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("no role", ()),
    ("kubernetes_worker", ("kubernetes_worker",)),
    ("consensus_member", ("consensus_member",)),
    ("consensus_member + kubernetes_controller", ("consensus_member", "kubernetes_controller")),
    ("all roles", ("consensus_member", "kubernetes_controller", "kubernetes_worker")),
)
"""Node 2's roles, in the order given: consensus_member comes once and stays, so etcd's
membership changes once."""

ALL_ROLES = ("consensus_member", "kubernetes_controller", "kubernetes_worker")
SETTLE = 5.0
"""Seconds between HEALTHY and the first reading: the workers' first rounds done."""
GOAL_KIB = 60 * 1024

LOADS_PLUGINS = (
    "import importlib.metadata, roleserve_core.daemon\n"
    "for entry in importlib.metadata.entry_points(group='roleserve.plugins'): entry.load()"
)
"""What a node process imports before its first worker starts."""


async def set_roles(cluster: LocalCluster, node: LocalNode, roles: tuple[str, ...]) -> None:
    """Give ``node`` exactly ``roles`` (the curator checks the roles after the change)."""
    identity = cluster.node_id(node)
    assert identity is not None
    async with cluster.management() as management:
        current = roles_from_proto((await cluster.nodes_by_id(management))[identity].roles)
        changes = [
            management_pb2.UpdateNodeRolesRequest.Change(role=role, assign=role in roles)
            for role in ALL_ROLES
            if current.has(role) != (role in roles)
        ]
        if changes:
            await management.UpdateNodeRoles(
                management_pb2.UpdateNodeRolesRequest(node_id=identity, changes=changes)
            )


async def restart_healthy(
    cluster: LocalCluster, node: LocalNode, roles: tuple[str, ...], env: dict[str, str]
) -> int:
    """Restart ``node`` (with ``env`` added to its environment); its PID once it reports
    UP and HEALTHY with ``roles``."""
    await until_healthy(cluster, node, roles)  # the role change done (a learner promoted)
    await node.stop()
    pid = node.start(env=env)
    await until_healthy(cluster, node, roles)
    return pid


async def until_healthy(cluster: LocalCluster, node: LocalNode, roles: tuple[str, ...]) -> None:
    identity = cluster.node_id(node)
    async with cluster.management() as management:

        async def ready() -> bool:
            record = (await cluster.nodes_by_id(management))[identity or ""]
            held = roles_from_proto(record.roles)
            return all(held.has(role) == (role in roles) for role in ALL_ROLES) and (
                not await cluster._not_healthy(management, [node])
            )

        # up's own wait and check (private: what up waits for is the figure's condition)
        await cluster._until(f"node {node.index} is HEALTHY with {roles}", ready, node=node)


async def rss_of(pid: int, samples: int) -> float:
    """The median VmRSS (MiB) of ``samples`` readings a second apart, after ``SETTLE``;
    prints the last reading's split: anonymous memory (the interpreter's heap, threads'
    stacks), file pages (the shared libraries' code: grpc's, cryptography's) and their
    PSS (what this process adds where other nodes map the same libraries), its threads
    and its malloc arenas."""
    await anyio.sleep(SETTLE)
    readings = []
    for _ in range(samples):
        readings.append(status_value(pid, "VmRSS") / 1024)
        await anyio.sleep(1.0)
    split = {name: kib / 1024 for name, kib in smaps_rollup(pid).items()}
    threads = status_value(pid, "Threads")
    print(
        f"  (anonymous {split['Anonymous']:.1f} MiB, files "
        f"{split['Rss'] - split['Anonymous']:.1f} MiB of which shared "
        f"{split['Shared_Clean']:.1f}; PSS {split['Pss']:.1f} MiB; {threads} threads, "
        f"{malloc_arenas(pid)} malloc arenas)"
    )
    return statistics.median(readings)


def mib(kib: float) -> str:
    return f"{kib / 1024:6.1f} MiB"


def cache_bytecode(directory: Path) -> None:
    """Let every process started from here on cache its bytecode in ``directory`` (module
    docstring), whatever ``PYTHONDONTWRITEBYTECODE`` says."""
    os.environ["PYTHONPYCACHEPREFIX"] = str(directory)
    os.environ["PYTHONDONTWRITEBYTECODE"] = ""  # empty: bytecode is written


def baselines(runs: int, warm_up: bool) -> tuple[float, float]:
    """VmRSS (KiB) of ``python -c pass`` and of ``python -c 'import grpc'``; prints the
    import of what a node loads before its workers against the first. ``warm_up``: one
    run of each first, not counted (it fills the bytecode cache)."""
    if warm_up:
        for code in ("pass", "import grpc", LOADS_PLUGINS):
            baseline(code, 1)
    bare_times, bare_sizes = baseline("pass", runs)
    _, grpc_sizes = baseline("import grpc", runs)
    load_times, load_sizes = baseline(LOADS_PLUGINS, runs)
    print_comparison(
        "import roleserve_core.daemon and every installed plugin's hook module",
        summarise(load_times),
        summarise(bare_times),
        "python -c pass",
    )
    bare, grpc = statistics.median(bare_sizes), statistics.median(grpc_sizes)
    print(f"  VmRSS       {mib(statistics.median(load_sizes))} at exit")
    print(f"baseline VmRSS: python -c pass {mib(bare)}; python -c 'import grpc' {mib(grpc)}")
    return bare, grpc


async def main(
    samples: int, runs: int, directory: Path | None, env: dict[str, str], cached: bool
) -> None:
    measured: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="node_weight-", dir=directory) as scratch:
        if cached:
            cache_bytecode(Path(scratch, "bytecode"))
            print("bytecode: cached in the run's directory (--cache-bytecode)")
        bare, grpc = baselines(runs, warm_up=cached)
        first = ipaddress.IPv4Address(f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.11")
        cluster = LocalCluster(Path(scratch), 2, first_address=first)
        try:
            start = time.perf_counter()
            await cluster.up()
            print(f"2-node cluster up in {time.perf_counter() - start:.1f} s")
            node = cluster.nodes[1]
            for name, roles in ROLE_SETS:
                await set_roles(cluster, node, roles)
                pid = await restart_healthy(cluster, node, roles, env)
                measured[name] = await rss_of(pid, samples)
                print(f"node 2, {name}: {measured[name]:.1f} MiB", flush=True)
        finally:
            await cluster.down()
    report(measured, bare / 1024, grpc / 1024)


def report(measured: dict[str, float], bare: float, grpc: float) -> None:
    none = measured["no role"]
    print("\nnode process VmRSS by node 2's roles (median; MiB)")
    print(f"  {'roles':42} {'RSS':>7} {'over no role':>13} {'× grpc':>7} {'× python':>9}")
    for name, size in measured.items():
        print(f"  {name:42} {size:7.1f} {size - none:+13.1f} {size / grpc:7.2f} {size / bare:9.2f}")
    worker = measured["kubernetes_worker"]
    verdict = "met" if worker * 1024 <= GOAL_KIB else "NOT met"
    print(f"goal: kubernetes_worker alone ≤ 60 MiB: {worker:.1f} MiB ({verdict})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5, help="RSS readings per role set")
    parser.add_argument("--runs", type=int, default=5, help="runs of each baseline")
    parser.add_argument("--dir", type=Path, help="where the cluster's directory goes")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable for node 2's process (a tuning to try: MALLOC_ARENA_MAX=2)",
    )
    parser.add_argument(
        "--cache-bytecode",
        action="store_true",
        help="every process of the run caches its bytecode, as an installed node has it "
        "(default: as the environment says)",
    )
    arguments = parser.parse_args()
    env = dict(item.partition("=")[::2] for item in arguments.env)
    anyio.run(main, arguments.samples, arguments.runs, arguments.dir, env, arguments.cache_bytecode)
