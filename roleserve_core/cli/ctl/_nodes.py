"""``ctl nodes``, ``ctl approve`` and ``ctl decommission``: the nodes and their life cycle.

``decommission`` cannot be undone (a decommissioned node may never join again), so it asks
first. Asking needs a person at a terminal: with stdin not a terminal and no ``--yes`` it
refuses instead of reading an answer from a pipe that was meant for something else.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._invocation import roleserve_command
from roleserve_core.cli._table import fill, output_width, render_table
from roleserve_core.cli.ctl import _command
from roleserve_core.cli.ctl._errors import EXIT_REFUSED, EXIT_USAGE, CtlError
from roleserve_core.cli.ctl._format import (
    NONE,
    format_age,
    format_roles_message,
    health_name,
    print_json,
    roles_json,
    seconds,
    state_name,
)
from roleserve_core.cli.ctl._node_plugins import failed_plugins

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto import management_pb2

__all__ = [
    "FAILED_PLUGIN_MARK",
    "NOTES",
    "add_parsers",
    "confirm",
    "conflict_lines",
    "failed_plugin_lines",
    "node_json",
    "node_row",
]

STATES = ("NEW", "STANDBY", "UP", "DECOMMISSIONED")
HEADERS = ("", "ID", "ADDRESS", "STATE", "ROLES", "HEALTH", "HEARTBEAT")
"""The first column holds ``*`` for the node whose curator leads."""
FAILED_PLUGIN_MARK = "!"
"""After the health of a node that started without a plugin that failed at its start."""
NOTES = ("ROLES",)
"""Under each row instead, when the table is wider than the terminal (``render_table``)."""


def add_parsers(commands: Any) -> None:
    """Register ``nodes``, ``approve`` and ``decommission``."""
    parser = _command.add(
        commands,
        "nodes",
        list_nodes,
        help="list the cluster's nodes",
        description=(
            "List the nodes of the cluster as the leading curator sees them: address, "
            "life-cycle state, roles, heartbeat health and the age of the last heartbeat. "
            "'*' marks the node whose curator leads. CONFLICT marks a node whose identity a "
            "second process (a copied data directory?) tried to use; a line under the "
            "table says where from. '!' after the health marks a node that started without "
            "a plugin that failed; a line under the table names it (`ctl plugins NODE` says "
            "why)."
        ),
    )
    parser.add_argument(
        "--state",
        action="append",
        type=str.upper,
        choices=STATES,
        default=[],
        help="only nodes in this state (repeatable)",
    )
    parser.add_argument(
        "--role",
        metavar="ROLE",
        default="",
        help="only nodes holding this role (e.g. kubernetes_worker, custom:backup)",
    )
    _command.add_json_option(parser)

    parser = _command.add(
        commands,
        "approve",
        approve,
        help="let a new node join",
        description=(
            "Approve a NEW node, which registered with a ticket: it may then commit and "
            "receive its node certificate (NEW → STANDBY). Approving a STANDBY or UP node "
            "changes nothing."
        ),
    )
    _command.add_node_argument(parser)

    parser = _command.add(
        commands,
        "decommission",
        decommission,
        help="remove a node from the cluster for good",
        description=(
            "Decommission a node: it leaves the cluster and may never join again. A "
            "consensus member must lose that role first (ctl roles unset NODE "
            "consensus_member). Asks for confirmation unless --yes."
        ),
    )
    _command.add_node_argument(parser)
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")


def node_row(node: management_pb2.Node) -> list[str]:
    """The table row of ``node``, in ``HEADERS`` order."""
    return [
        "*" if node.leader else "",
        node.id,
        node.status.external_address or NONE,
        state_name(node.state),
        format_roles_message(node.roles),
        _health(node),
        format_age(_heartbeat_age(node)),
    ]


def _health(node: management_pb2.Node) -> str:
    """The heartbeat's health, marked if a plugin failed: the node is alive, but not all
    of it runs, which the health alone would hide."""
    mark = FAILED_PLUGIN_MARK if failed_plugins(node) else ""
    return health_name(node.health) + mark + (", CONFLICT" if node.conflict else "")


def failed_plugin_lines(nodes: list[management_pb2.Node]) -> list[str]:
    """One line under the table per node marked ``!``: which plugins failed."""
    lines = []
    for node in nodes:
        if failed := failed_plugins(node):
            names = ", ".join(failed)
            noun = "plugin" if len(failed) == 1 else "plugins"
            lines.append(
                f"{node.id}: {FAILED_PLUGIN_MARK} {noun} {names} failed: it started without; "
                f"`{roleserve_command()} ctl plugins {node.id}` says why"
            )
    return lines


def conflict_lines(nodes: list[management_pb2.Node]) -> list[str]:
    """One line under the table per node that two processes claim: the table's CONFLICT
    says that something is wrong, the line says what the curator saw."""
    return [f"{node.id}: CONFLICT: {node.conflict}" for node in nodes if node.conflict]


def node_json(node: management_pb2.Node) -> dict[str, Any]:
    """``node`` for scripts: every field an operator decides on, none of the certificates."""
    return {
        "id": node.id,
        "address": node.status.external_address or None,
        "state": state_name(node.state),
        "roles": roles_json(node.roles),
        "health": health_name(node.health),
        "heartbeat_age": _heartbeat_age(node),
        "leader": node.leader,
        "version": node.status.version or None,
        "labels": {pair.key: pair.value for pair in node.labels.pairs},
        "conflict": node.conflict or None,
        "failed_plugins": failed_plugins(node),
        "cluster_prefix": node.cluster_prefix or None,
        "clusternet": {
            "wireguard_pubkey": node.clusternet.wireguard_pubkey,
            "prefixes": list(node.clusternet.prefixes),
        }
        if node.clusternet.wireguard_pubkey
        else None,
    }


def _heartbeat_age(node: management_pb2.Node) -> float | None:
    if not node.HasField("time_since_heartbeat"):
        return None
    return seconds(node.time_since_heartbeat)


async def list_nodes(session: Session, args: argparse.Namespace) -> None:
    """``ctl nodes``."""
    from roleserve_core.proto import common_pb2, management_pb2

    request = management_pb2.GetNodesRequest(
        states=[common_pb2.NodeState.Value(f"NODE_STATE_{state}") for state in args.state],
        role=args.role,
    )
    nodes = await session.nodes(request)
    if args.json:
        print_json([node_json(node) for node in nodes])
    else:
        rows = [node_row(node) for node in nodes]
        print(render_table(HEADERS, rows, width=output_width(), notes=NOTES))
        for line in [*conflict_lines(nodes), *failed_plugin_lines(nodes)]:
            print(fill(line, output_width()))


async def approve(session: Session, args: argparse.Namespace) -> None:
    """``ctl approve NODE``."""
    from roleserve_core.proto import management_pb2

    node = await session.resolve(args.node)
    request = management_pb2.ApproveNodeRequest(node_id=node.id)
    await session.call(f"approving {node.id}", session.management.ApproveNode, request)
    print(f"approved {node.id}")


async def decommission(session: Session, args: argparse.Namespace) -> None:
    """``ctl decommission NODE [--yes]``."""
    from roleserve_core.proto import management_pb2

    node = await session.resolve(args.node)
    if not args.yes:
        address = node.status.external_address or "no address"
        await confirm(
            f"Decommission {node.id} ({address})? It can never join again.",
            f"decommissioning {node.id}",
        )
    request = management_pb2.DecommissionNodeRequest(node_id=node.id)
    await session.call(f"decommissioning {node.id}", session.management.DecommissionNode, request)
    print(f"decommissioned {node.id}")


async def confirm(question: str, action: str) -> None:
    """Ask ``question`` on the terminal; return only if the answer is yes.

    :param action: what needs the confirmation, for the refusal (``decommissioning X``).
    :raises CtlError: if stdin is no terminal (exit 2: pass --yes), or the answer is not yes.
    """
    if sys.stdin is None or not sys.stdin.isatty():
        raise CtlError(
            f"{action} needs confirmation, and stdin is not a terminal to ask on; "
            "pass --yes to confirm",
            EXIT_USAGE,
        )
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    import anyio.to_thread

    # Reading blocks: in a thread, abandoned on Ctrl-C, so the loop can still stop.
    answer = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    if answer.strip().lower() not in ("y", "yes"):
        raise CtlError("not confirmed; nothing was changed", EXIT_REFUSED)
