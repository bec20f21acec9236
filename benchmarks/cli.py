"""How fast the ``roleserve`` command answers: the commands an operator types most, each
against its goal (issue 30, item 5).

Run: ``./dev sync && .venv/bin/python benchmarks/cli.py [--runs 20] [--nodes 3]``.

Each command runs ``--runs`` times as a fresh process, as the operator runs it (the
installed ``roleserve`` script), timed from ``exec`` to exit, interleaved with the others
and the baselines; the median is compared with its goal:

- ``roleserve --version``, ``roleserve --help``, ``roleserve ctl --help``: < 3× ``python -c
  pass`` (the interpreter alone, measured in the same run);
- ``roleserve ctl nodes`` against a running local cluster of ``--nodes`` nodes: < 250 ms.
  Three times: as it runs day to day (the leader remembered in the access directory, asked first),
  and searching (the remembered leader removed before each run: every curator asked),
  and with its credentials checked anew (cryptography: the record of the last check,
  ``checked``, removed before each run), as the first run on new credentials does.
  The cluster is brought up once, detached, in a directory of its own on a random
  127.X.Y.11, and stopped at the end; or ``--cluster DIR`` names a running one.

Then where ``ctl nodes`` spends its time: its imports (a process importing what it imports,
against ``python -c 'import grpc'`` and against the floor of any command that calls the
curator: grpc's asyncio API, anyio and the stubs), and,
in one process with those imports done, each step: the search (``find_leader``), the
leader's answer on the session's channel (TLS handshake included), the remembered leader's,
``GetClusterInfo`` (the curators remembered) and ``GetNodes``.

Every process runs with Python's bytecode cache, as an installed ``roleserve`` does
(``AS_INSTALLED``). Figures taken on a shared machine are noisy: compare the ratios, each
to its baseline of the same run. Each line ends with the median CPU time the process used
(user + system): on a loaded machine it moves much less than the time to exit, which
includes the waits for a core.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
from _report import Summary, summarise

from roleserve_core.access import CHECKED_FILE
from roleserve_core.cli.ctl._last_leader import LEADER_FILE
from roleserve_core.localcluster import LocalCluster

VERSUS_PASS = 3.0
"""The goal of ``--version`` and the help: under this many times ``python -c pass``."""
CTL_NODES_GOAL = 0.250
"""The goal of ``ctl nodes``, in seconds."""
CTL_NODES_IMPORTS = "import roleserve_core.cli.ctl._command, roleserve_core.cli.ctl._nodes, "
CTL_NODES_IMPORTS += "roleserve_core.cli.ctl._session"
"""What ``ctl nodes`` imports before it talks to the cluster."""
FLOOR_IMPORTS = "import anyio, grpc.aio, roleserve_core.proto.curator_pb2_grpc, "
FLOOR_IMPORTS += "roleserve_core.proto.management_pb2_grpc"
"""The least a command that calls the curator must import: gRPC's asyncio API, anyio, and
the two services' stubs and messages (protobuf)."""

PHASES = """
import json, sys, time
from pathlib import Path
import anyio
from roleserve_core.access import ClusterAccess
from roleserve_core.cli.ctl import _session
from roleserve_core.connection import find_leader
from roleserve_core.proto import management_pb2, management_pb2_grpc

async def main():
    access = ClusterAccess.load(Path(sys.argv[1]))
    took = {}
    start = time.perf_counter()
    leader = await find_leader(access.endpoints, access.tls, timeout=10)
    took["find_leader (every curator asked)"] = time.perf_counter() - start
    for title in ("the leader says it leads (its channel, TLS)", "the remembered leader"):
        start = time.perf_counter()
        channel = await _session._leading_channel(access, leader.node_id, leader.endpoint, 2)
        took[title] = time.perf_counter() - start
        assert channel is not None
    management = management_pb2_grpc.ManagementStub(channel)
    start = time.perf_counter()
    await management.GetClusterInfo(management_pb2.GetClusterInfoRequest(), timeout=10)
    took["GetClusterInfo"] = time.perf_counter() - start
    start = time.perf_counter()
    [node async for node in management.GetNodes(management_pb2.GetNodesRequest(), timeout=10)]
    took["GetNodes"] = time.perf_counter() - start
    await channel.close()
    print(json.dumps(took))

anyio.run(main)
"""
"""Times each step of ``ctl nodes`` in one process (``_leading_channel`` twice: the second
stands for the remembered leader's check, which is the same call)."""


AS_INSTALLED = {
    name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"
}
"""The environment of every command: as on an operator's machine, Python caches the
bytecode of what it imports (without it, every run compiles grpc's and anyio's modules
anew, tens of milliseconds that no installed ``roleserve`` spends)."""


class Run:
    """A command to time: its line, environment, and what to do before each run (untimed)."""

    def __init__(
        self,
        command: Sequence[str],
        env: dict[str, str] | None = None,
        before: Callable[[], None] = lambda: None,
    ) -> None:
        self.command = list(command)
        self.env = env if env is not None else AS_INSTALLED
        self.before = before

    def once(self) -> tuple[float, float]:
        """Seconds from exec to exit, and the CPU seconds it used; it must succeed."""
        self.before()
        cpu = _children_cpu()
        start = time.perf_counter()
        subprocess.run(self.command, capture_output=True, check=True, env=self.env)
        return time.perf_counter() - start, _children_cpu() - cpu


def _children_cpu() -> float:
    """User and system CPU seconds of every child process waited for so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


class Timed:
    """A command's time to exit, and the CPU time it used."""

    def __init__(self, wall: Summary, cpu: Summary) -> None:
        self.wall, self.cpu = wall, cpu
        self.median = wall.median

    def __str__(self) -> str:
        return f"{ms(self.wall.median)}  (cpu {ms(self.cpu.median).strip()})"


def timed(runs: dict[str, Run], rounds: int) -> dict[str, Timed]:
    """Each of ``runs`` ``rounds`` times, interleaved (one of each per round), so that the
    load of a shared machine weighs on every command and its baselines alike; once untimed
    first, so that Python's bytecode cache is written."""
    for run in runs.values():
        run.once()
    samples: dict[str, list[tuple[float, float]]] = {title: [] for title in runs}
    for _ in range(rounds):
        for title, run in runs.items():
            samples[title].append(run.once())
    return {
        title: Timed(summarise([w for w, _ in taken]), summarise([c for _, c in taken]))
        for title, taken in samples.items()
    }


def roleserve(*arguments: str) -> list[str]:
    """The command line of ``roleserve ARGUMENTS``: the installed script beside this
    interpreter (as the operator runs it), else ``python -m roleserve_core``."""
    script = Path(sys.executable).with_name("roleserve")
    if script.exists():
        return [sys.executable, str(script), *arguments]
    return [sys.executable, "-m", "roleserve_core", *arguments]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.1f} ms"


def verdict(met: bool) -> str:
    return "meets the goal" if met else "MISSES the goal"


def against_pass(title: str, measured: Timed, interpreter: Timed) -> None:
    """One line: the median, its ratio to ``python -c pass``, the goal, the CPU time."""
    ratio = measured.median / interpreter.median
    print(
        f"{title:<44} {ms(measured.median)}  {ratio:5.2f}× python -c pass"
        f"  (goal < {VERSUS_PASS:g}×: {verdict(ratio < VERSUS_PASS)})"
        f"  cpu {ms(measured.cpu.median).strip()}"
    )


def against_goal(title: str, measured: Timed, baseline: Timed) -> None:
    """One line: the median against ``CTL_NODES_GOAL``, its ratio to ``import grpc``, the
    CPU time."""
    ratio = measured.median / baseline.median
    print(
        f"{title:<44} {ms(measured.median)}  {ratio:5.2f}× import grpc"
        f"  (goal < {CTL_NODES_GOAL * 1e3:g} ms: {verdict(measured.median < CTL_NODES_GOAL)})"
        f"  cpu {ms(measured.cpu.median).strip()}"
    )


def phases(owner: Path, runs: int) -> dict[str, float]:
    """The median of each step of ``ctl nodes`` over ``runs`` processes (``PHASES``)."""
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", PHASES, str(owner)],
            capture_output=True,
            check=True,
            env=AS_INSTALLED,
        )
        for step, seconds in json.loads(done.stdout).items():
            samples.setdefault(step, []).append(seconds)
    return {step: statistics.median(taken) for step, taken in samples.items()}


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
    parser.add_argument(
        "--cluster",
        metavar="DIR",
        type=Path,
        help="a running local cluster's directory (`cluster up --dir`) to use, left running",
    )
    args = parser.parse_args()

    def ctl_nodes(owner: Path) -> None:
        env = {**AS_INSTALLED, "ROLESERVE_CREDENTIALS": str(owner)}
        command = roleserve("ctl", "nodes")

        def forget() -> None:
            (owner / LEADER_FILE).unlink(missing_ok=True)

        def uncheck() -> None:
            (owner / CHECKED_FILE).unlink(missing_ok=True)

        found = timed(
            {
                "pass": Run([sys.executable, "-c", "pass"]),
                "grpc": Run([sys.executable, "-c", "import grpc"]),
                "--version": Run(roleserve("--version")),
                "--help": Run(roleserve("--help")),
                "ctl --help": Run(roleserve("ctl", "--help")),
                "floor": Run([sys.executable, "-c", FLOOR_IMPORTS]),
                "imports": Run([sys.executable, "-c", CTL_NODES_IMPORTS]),
                "ctl nodes (searching)": Run(command, env, before=forget),
                "ctl nodes (checking)": Run(command, env, before=uncheck),
                "ctl nodes": Run(command, env),  # after the search: the leader remembered
            },
            args.runs,
        )
        interpreter, grpc = found["pass"], found["grpc"]
        print(f"{'python -c pass (baseline)':<44} {interpreter}")
        print(f"{'python -c import grpc (baseline)':<44} {grpc}")
        for command_line in ("--version", "--help", "ctl --help"):
            against_pass(f"roleserve {command_line}", found[command_line], interpreter)
        for title, key in (
            ("the floor: grpc.aio, anyio, the stubs", "floor"),
            ("ctl nodes imports alone", "imports"),
        ):
            ratio = found[key].median / grpc.median
            print(f"{title:<44} {found[key]}  {ratio:5.2f}× import grpc")
        against_goal("roleserve ctl nodes", found["ctl nodes"], grpc)
        against_goal(
            "roleserve ctl nodes (searching for the leader)", found["ctl nodes (searching)"], grpc
        )
        against_goal(
            "roleserve ctl nodes (credentials checked anew)", found["ctl nodes (checking)"], grpc
        )
        print("ctl nodes, step by step (one process, imports done; medians):")
        for step, seconds in phases(owner, min(args.runs, 10)).items():
            print(f"  {step:<42} {ms(seconds)}")

    if args.cluster is not None:
        ctl_nodes(args.cluster / "owner")
    else:
        anyio.run(with_cluster, args.nodes, lambda cluster: ctl_nodes(cluster.owner_directory))


if __name__ == "__main__":
    main()
