"""``ctl nodes``, ``ctl approve`` and ``ctl decommission``: the nodes and their life cycle.

``decommission`` cannot be undone (a decommissioned node may never join again), so it asks
first. Asking needs a person at a terminal: with stdin not a terminal and no ``--yes`` it
refuses instead of reading an answer from a pipe that was meant for something else.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import print_json
from roleserve_core.cli._node_display import STATES, NodeTable, node_json
from roleserve_core.cli._table import output_width
from roleserve_core.cli.ctl import _command
from roleserve_core.cli.ctl._errors import EXIT_REFUSED, EXIT_USAGE, CtlError

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session

__all__ = ["add_parsers", "confirm"]


def add_parsers(commands: Any) -> None:
    """Register ``nodes``, ``approve`` and ``decommission``."""
    parser = _command.add(
        commands,
        "nodes",
        list_nodes,
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
        description=(
            "Decommission a node: it leaves the cluster and may never join again. A "
            "consensus member must lose that role first (ctl roles unset NODE "
            "consensus_member). Asks for confirmation unless --yes."
        ),
    )
    _command.add_node_argument(parser)
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")


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
        table = NodeTable()
        for node in nodes:
            table.add(node)
        print(table.render(output_width()))


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
