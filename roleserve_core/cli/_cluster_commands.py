"""What ``roleserve cluster up|down|status`` do (``cluster`` is their command line).

``up`` brings the cluster up (``LocalCluster.up``), one ``up`` at a time on a directory
(``localcluster.lock``: a second waits for the first, then reports the whole cluster),
and shows a live status table under the hint of how to operate it, until Ctrl-C stops
the nodes it started (those it found running keep running, and it says so; so does a
failed ``up``), or until ``cluster down`` from another terminal stopped them all (it
says so, exit 0); ``down`` stops the nodes a detached ``up`` left running; ``status`` shows
them, with what the leading curator knows. Plugins add to both (``cluster_extension``): what
``up`` waits for before it says the cluster is up, a column of the table each, and a line
under it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from roleserve_core.cli._format import NONE, print_json
from roleserve_core.cli._invocation import roleserve_command
from roleserve_core.cli._node_display import NodeTable, node_json
from roleserve_core.cli._table import output_width
from roleserve_core.cluster_extension import load_extensions
from roleserve_core.environment import CREDENTIALS_ENV
from roleserve_core.localcluster import LocalCluster, size_for_up
from roleserve_core.localcluster.lock import holding_up_lock
from roleserve_core.localcluster.nodeconfig import HOSTS_FILE
from roleserve_core.proto import management_pb2

__all__ = ["COMMANDS"]

REFRESH = 2.0
"""Seconds between redraws of the live status table."""


def _progress(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


async def _up(args: argparse.Namespace) -> int:
    _progress(f"cluster directory {args.dir.absolute()}")
    since = time.time()
    cluster: LocalCluster | None = None
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        stopped = by_down = False
        async with anyio.create_task_group() as tasks:

            async def interrupted() -> None:
                nonlocal stopped
                async for _ in signals:
                    stopped = True
                    tasks.cancel_scope.cancel()

            tasks.start_soon(interrupted)
            async with holding_up_lock(args.dir, _progress):
                # Read the directory only once it is this up's: another one may have
                # grown the cluster meanwhile.
                cluster = LocalCluster(
                    args.dir,
                    size_for_up(args.dir, args.nodes),
                    first_address=args.first_address,
                    netns=args.netns,
                    progress=_progress,
                    extensions=load_extensions(_progress),
                    kubernetes_workers=args.kubernetes_workers,
                    cluster_network=args.cluster_network,
                )
                try:
                    await cluster.up()
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await cluster.stop_started()
                    raise
            if args.detach:
                await _print_status(cluster, args.dir, json=False)
                tasks.cancel_scope.cancel()
            else:
                await _live_status(cluster, args.dir, since)
                by_down = True
                tasks.cancel_scope.cancel()
        if cluster is None:  # interrupted while waiting for the other up
            return 130
        if by_down:
            _progress("stopped by cluster down")
            return 0
        if not args.detach:
            with anyio.CancelScope(shield=True):
                every = await cluster.stop_started()
            _progress("every node stopped" if every else "the nodes this run started stopped")
    if args.detach:
        print(await _hints(cluster, args.dir))
        print(f"stop it with: {roleserve_command()} cluster down --dir {args.dir}")
    return 130 if stopped and args.detach else 0


def _hint(directory: Path) -> str:
    owner = directory / "owner"
    return f"operate it with: export {CREDENTIALS_ENV}={owner}; {roleserve_command()} ctl nodes"


async def _hints(cluster: LocalCluster, directory: Path) -> str:
    """How to operate the cluster, then each plugin extension's line (e.g. the kubectl
    command that lists Kubernetes' nodes), which may depend on the nodes' roles."""
    view = cluster.view(await _nodes(cluster) if cluster.extensions else {})
    lines = [_hint(directory), *(extension.hint(view) for extension in cluster.extensions)]
    return "\n".join(line for line in lines if line is not None)


async def _live_status(cluster: LocalCluster, directory: Path, since: float) -> None:
    """Redraw the status table until cancelled (Ctrl-C), or until ``cluster down`` (in
    another terminal) stopped the cluster after ``since``: there is nothing left to show
    then, and an ``up`` that kept waiting looked hung. The table is drawn once if stdout is
    no terminal.

    The hint goes under the table on every redraw: printed once before, it was cleared
    with the screen at the first redraw, just when the reader needed it.
    """
    if not sys.stdout.isatty():
        await _print_status(cluster, directory, json=False)
        print(await _hints(cluster, directory), flush=True)
        while True:  # the directory, polled: there is no event to wait on
            await anyio.sleep(REFRESH)
            if cluster.stopped_by_down(since):
                return
    while not cluster.stopped_by_down(since):
        table = await _status_table(cluster)
        print("\x1b[2J\x1b[H", end="")
        print(
            f"roleserve cluster in {directory}    {time.strftime('%H:%M:%S')}    Ctrl-C stops it\n"
        )
        print(table)
        print(f"\n{await _hints(cluster, directory)}", flush=True)
        await anyio.sleep(REFRESH)


async def _down(args: argparse.Namespace) -> int:
    cluster = LocalCluster.existing(args.dir, progress=_progress)
    running = any(node.pid is not None for node in cluster.nodes)
    if not running:
        _progress(f"no node of {args.dir} is running")
    cluster.record_down()  # for a foreground up showing this cluster: it ends too
    await cluster.down()  # also removes the network of a --netns cluster
    if running:
        _progress("every node stopped")
    return 0


async def _status(args: argparse.Namespace) -> int:
    cluster = LocalCluster.existing(args.dir, extensions=load_extensions(_progress))
    await _print_status(cluster, args.dir, json=args.json)
    return 0


async def _print_status(cluster: LocalCluster, directory: Path, *, json: bool) -> None:
    if json:
        nodes = await _nodes(cluster)
        columns = await _extension_columns(cluster, nodes)
        print_json(
            [_node_json(cluster, index, nodes, columns) for index in range(len(cluster.nodes))]
        )
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
    """Every local node: its process's cells, then what the leader knows of it (as ``ctl
    nodes`` shows it, with the lines that explain its marks), then the plugin extensions'
    cells; under it, where the hosts files are."""
    nodes = await _nodes(cluster)
    columns = await _extension_columns(cluster, nodes)
    table = NodeTable(before=("NODE", "PID"), after=tuple(columns))
    for local in cluster.nodes:
        identity = cluster.node_id(local) or ""
        table.add(
            nodes.get(identity),
            before=[f"n{local.index}", str(local.pid or "stopped")],
            after=[column.get(identity, NONE) for column in columns.values()],
            node_id=identity,
            address=str(local.address),
        )
    return table.render(output_width(), lines=[_hosts_files(cluster)])


EXTENSION_PATIENCE = 5.0
"""Seconds a plugin extension may take to give its column's cells."""
UNKNOWN = "?"
"""The cells of an extension's column that did not answer in time."""


async def _extension_columns(
    cluster: LocalCluster, nodes: dict[str, management_pb2.Node]
) -> dict[str, Mapping[str, str]]:
    """Each plugin extension's column (``cluster_extension``): header → cells by node ID.
    One that gives none (its components are not installed) has no column; one that does
    not answer in time shows ``?`` in every row: the table is redrawn every few seconds
    and must not wait for a plugin."""
    view = cluster.view(nodes)
    columns: dict[str, Mapping[str, str]] = {}
    for extension in cluster.extensions:
        cells: Mapping[str, str] | None = {
            member.node_id: UNKNOWN for member in view.nodes if member.node_id
        }
        with anyio.move_on_after(EXTENSION_PATIENCE):
            cells = await extension.cells(view)
        if cells is not None:
            columns[extension.column] = cells
    return columns


def _hosts_files(cluster: LocalCluster) -> str | None:
    """One line under the table: where each node's hosts file is (``[plugins.hostsfile]
    path``), as a pattern when every node has its own in its directory, with the nodes
    whose file is elsewhere named; None when no node names one (no hostsfile plugin)."""
    default = f"{cluster.directory}/n<i>/{HOSTS_FILE}"
    elsewhere, kept = [], False
    for local in cluster.nodes:
        path = cluster.hosts_file(local)
        if path == local.directory / HOSTS_FILE:
            kept = True
        elif path is not None:
            elsewhere.append(f"n{local.index}: {path}")
    if not kept and not elsewhere:
        return None
    return f"hosts files: {', '.join(([default] if kept else []) + elsewhere)}"


def _node_json(
    cluster: LocalCluster,
    index: int,
    nodes: dict[str, management_pb2.Node],
    columns: dict[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """One node for scripts; ``columns``: the plugin extensions' cells, by header (a node
    an extension leaves out: null)."""
    local = cluster.nodes[index]
    identity = cluster.node_id(local)
    known = nodes.get(identity or "")
    return {
        "node": f"n{local.index}",
        "address": str(local.address),
        "namespace": local.namespace,
        "pid": local.pid,
        "directory": str(local.directory),
        "hosts_file": None if (hosts := cluster.hosts_file(local)) is None else str(hosts),
        "cluster": node_json(known) if known else None,
        "columns": {header: cells.get(identity or "") for header, cells in (columns or {}).items()},
    }


COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "up": _up,
    "down": _down,
    "status": _status,
}
"""Each sub-command's body, by name."""
