"""``roleserve cluster up|down|status``: a cluster of node processes on this machine.

``up`` starts N nodes on 127.0.0.11, 127.0.0.12, ... (``--first-address`` moves them; see
``localcluster``), prints each
step, then a live status table until Ctrl-C, which stops every node cleanly. ``--detach``
leaves the nodes running instead; ``down`` stops them and ``status`` shows them.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from roleserve_core.access import CREDENTIALS_ENV
from roleserve_core.cli._failure import report, sole_error
from roleserve_core.cli._invocation import roleserve_command
from roleserve_core.cli._table import render_table
from roleserve_core.cli.ctl._format import NONE, print_json
from roleserve_core.cli.ctl._nodes import HEADERS, node_json, node_row
from roleserve_core.errors import RoleserveError
from roleserve_core.localcluster import DEFAULT_SIZE, FIRST_ADDRESS, LocalCluster, size_for_up
from roleserve_core.proto import management_pb2

__all__ = ["add_parser", "default_cluster_directory"]

REFRESH = 2.0
"""Seconds between redraws of the live status table."""


def default_cluster_directory() -> Path:
    """``$XDG_STATE_HOME/roleserve/cluster`` (``~/.local/state/roleserve/cluster``)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "roleserve" / "cluster"


def add_parser(commands: Any) -> None:
    """Register ``roleserve cluster``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "cluster",
        help="a local cluster of node processes, for trying roleserve and testing plugins",
        description=(
            "Run a cluster of node processes on this machine: node i listens on 127.0.0.1x "
            "(127.0.0.11, 127.0.0.12, ...) with the standard ports, as real nodes do on "
            "their own addresses. Every installed plugin runs on every node."
        ),
    )
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND")
    up = subcommands.add_parser(
        "up",
        help="start (or resume) the cluster, then show its status until Ctrl-C",
        description=(
            "Bootstrap node 1, register and approve the others, give them roles (three "
            "consensus members when there are three nodes or more; kubernetes_worker on "
            "every node), wait until all are UP and HEALTHY, then show a live status table. "
            "Ctrl-C stops every node cleanly. Run it again on the same directory to bring "
            "the same cluster back: it starts every node that is not running (all of them "
            "before it waits for a leader), then enrols any it lacks."
        ),
    )
    up.add_argument(
        "--nodes",
        type=_node_count,
        default=None,
        metavar="N",
        help=(
            f"how many nodes: default {DEFAULT_SIZE} for a new cluster, else as many as "
            "--dir holds; more than it holds adds nodes, fewer is refused (a node leaves "
            "through `ctl decommission`)"
        ),
    )
    up.add_argument(
        "--first-address",
        type=_loopback_address,
        default=None,
        metavar="ADDRESS",
        help=(
            f"node 1's address; node i gets the i-th from it (default {FIRST_ADDRESS}, or "
            "what the cluster in --dir was created with). Another one runs a second cluster "
            "beside the first: e.g. 127.0.1.11"
        ),
    )
    up.add_argument(
        "--detach",
        action="store_true",
        help="leave the nodes running and exit (stop them with `roleserve cluster down`)",
    )
    _directory_option(up)
    up.set_defaults(handler=lambda args: _run(_up, args))
    down = subcommands.add_parser(
        "down", help="stop a detached cluster", description="Stop every node of the cluster."
    )
    _directory_option(down)
    down.set_defaults(handler=lambda args: _run(_down, args))
    status = subcommands.add_parser(
        "status",
        help="show the cluster's nodes",
        description="Show every node: its process, and what the leading curator knows of it.",
    )
    _directory_option(status)
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(handler=lambda args: _run(_status, args))
    parser.set_defaults(handler=lambda args: _usage(parser))


def _node_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 50:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of nodes from 1 to 50")
    return int(text)


def _loopback_address(text: str) -> ipaddress.IPv4Address:
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a loopback IPv4 address (127.0.0.0/8), where local nodes live"
        )
    return address


def _directory_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"the cluster's directory (default {default_cluster_directory()})",
    )


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _run(command: Callable[[argparse.Namespace], Awaitable[int]], args: argparse.Namespace) -> int:
    args.dir = (args.dir or default_cluster_directory()).expanduser()
    try:
        with sole_error():
            return anyio.run(command, args)
    except RoleserveError as exc:
        report("roleserve cluster", exc)
        return 1


def _progress(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


async def _up(args: argparse.Namespace) -> int:
    size = size_for_up(args.dir, args.nodes)
    cluster = LocalCluster(args.dir, size, first_address=args.first_address, progress=_progress)
    _progress(f"cluster directory {cluster.directory}")
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        stopped = False
        async with anyio.create_task_group() as tasks:

            async def interrupted() -> None:
                nonlocal stopped
                async for _ in signals:
                    stopped = True
                    tasks.cancel_scope.cancel()

            tasks.start_soon(interrupted)
            try:
                await cluster.up()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await cluster.down()
                raise
            if args.detach:
                await _print_status(cluster, args.dir, json=False)
                tasks.cancel_scope.cancel()
            else:
                await _live_status(cluster, args.dir)
        if not args.detach:
            with anyio.CancelScope(shield=True):
                await cluster.down()
            _progress("every node stopped")
    if args.detach:
        print(_hint(args.dir))
        print(f"stop it with: {roleserve_command()} cluster down --dir {args.dir}")
    return 130 if stopped and args.detach else 0


def _hint(directory: Path) -> str:
    owner = directory / "owner"
    return f"operate it with: export {CREDENTIALS_ENV}={owner}; {roleserve_command()} ctl nodes"


async def _live_status(cluster: LocalCluster, directory: Path) -> None:
    """Redraw the status table until cancelled (Ctrl-C); once if stdout is no terminal.

    The hint goes under the table on every redraw: printed once before, it was cleared
    with the screen at the first redraw, just when the reader needed it.
    """
    if not sys.stdout.isatty():
        await _print_status(cluster, directory, json=False)
        print(_hint(directory), flush=True)
        await anyio.sleep_forever()
    while True:
        table = await _status_table(cluster)
        print("\x1b[2J\x1b[H", end="")
        print(
            f"roleserve cluster in {directory}    {time.strftime('%H:%M:%S')}    Ctrl-C stops it\n"
        )
        print(table)
        print(f"\n{_hint(directory)}", flush=True)
        await anyio.sleep(REFRESH)


async def _down(args: argparse.Namespace) -> int:
    cluster = LocalCluster.existing(args.dir, progress=_progress)
    if all(node.pid is None for node in cluster.nodes):
        _progress(f"no node of {args.dir} is running")
        return 0
    await cluster.down()
    _progress("every node stopped")
    return 0


async def _status(args: argparse.Namespace) -> int:
    cluster = LocalCluster.existing(args.dir)
    await _print_status(cluster, args.dir, json=args.json)
    return 0


async def _print_status(cluster: LocalCluster, directory: Path, *, json: bool) -> None:
    if json:
        nodes = await _nodes(cluster)
        print_json([_node_json(cluster, index, nodes) for index in range(len(cluster.nodes))])
    else:
        print(await _status_table(cluster), flush=True)


async def _nodes(cluster: LocalCluster) -> dict[str, management_pb2.Node]:
    """What the leader knows of each node; nothing if no leader answers in time."""
    if not any(node.pid is not None for node in cluster.nodes):
        return {}
    with anyio.move_on_after(5):
        async with cluster.management() as management:
            return await cluster.nodes_by_id(management)
    return {}


async def _status_table(cluster: LocalCluster) -> str:
    nodes = await _nodes(cluster)
    rows = []
    for local in cluster.nodes:
        known = nodes.get(cluster.node_id(local) or "")
        cells = (
            node_row(known)
            if known
            else ["", cluster.node_id(local) or NONE, str(local.address), *[NONE] * 4]
        )
        rows.append([f"n{local.index}", str(local.pid or "stopped"), *cells])
    return render_table(("NODE", "PID", *HEADERS), rows)


def _node_json(
    cluster: LocalCluster, index: int, nodes: dict[str, management_pb2.Node]
) -> dict[str, Any]:
    local = cluster.nodes[index]
    identity = cluster.node_id(local)
    known = nodes.get(identity or "")
    return {
        "node": f"n{local.index}",
        "address": str(local.address),
        "pid": local.pid,
        "directory": str(local.directory),
        "cluster": node_json(known) if known else None,
    }
