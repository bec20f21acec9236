"""``ctl tree NODE [DN]``: a node's supervision tree, drawn as a tree; ``ctl restart NODE
DN``: restart one runnable of it.

The node sends its runnables as a flat list, parents before children; each one's parent is
its DN without the last part (``root.role.heartbeat`` under ``root.role``). The drawing puts
each under its parent::

    root  HEALTHY
    ├── network  HEALTHY  address 127.0.0.11
    └── role  HEALTHY
        └── nodemgmt  DEAD  restarts=3 failures=3  crash-looping  last error: OSError: ...

Each line: the name (the full DN for the top), the state, then only what is there:
restarts and failures, crash-looping, ``final`` (it failed in a way restarting cannot fix;
it waits for the operator), the runnable's note, its last error (first line; for a final
one the note already says it), and the time left of its restart backoff. ``--json`` gives
the flat list with every field, tracebacks included, for scripts.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import format_duration, print_json, seconds, timestamp_json
from roleserve_core.cli.ctl import _command

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto.nodemanagement_pb2 import Runnable

__all__ = [
    "add_parsers",
    "describe",
    "draw_tree",
    "restart_runnable",
    "runnable_json",
    "show_tree",
]

BRANCH, LAST_BRANCH = "├── ", "└── "
PIPE, SPACE = "│   ", "    "


def add_parsers(commands: Any) -> None:
    """Register ``tree`` and ``restart``."""
    parser = _command.add(
        commands,
        "tree",
        show_tree,
        without_leader=True,
        description=(
            "Show the supervision tree of NODE (or its subtree at DN): every runnable with "
            "its state, restarts and failures, note, last error and restart backoff."
        ),
    )
    _command.add_node_argument(parser)
    parser.add_argument("dn", metavar="DN", nargs="?", default="root", help="default: root")
    _command.add_json_option(parser)
    parser = _command.add(
        commands,
        "restart",
        restart_runnable,
        without_leader=True,
        description=(
            "Restart the runnable DN of NODE and everything under it, at once (no backoff), "
            "as its supervisor would after a failure. Not root: stop the node for that. The "
            "node logs who asked."
        ),
    )
    _command.add_node_argument(parser)
    parser.add_argument("dn", metavar="DN", help="the runnable, e.g. root.role.heartbeat")


FINAL_MARK = "final (not restarted until fixed and restarted with `ctl restart`)"
"""Shown after DEAD for a runnable that failed with a final error."""


def describe(runnable: Runnable, name: str) -> str:
    """One line about ``runnable``, called ``name``: nothing is shown that is not there."""
    parts = [name, runnable.state]
    if runnable.restarts or runnable.failures:
        parts.append(f"restarts={runnable.restarts} failures={runnable.failures}")
    if runnable.crash_looping:
        parts.append("crash-looping")
    if runnable.final:
        parts.append(FINAL_MARK)
    if runnable.note:
        parts.append(runnable.note)
    if runnable.last_error and not runnable.final:  # a final error's message is the note
        parts.append(f"last error: {runnable.last_error.splitlines()[0]}")
    if runnable.HasField("restart_in"):
        parts.append(f"restart in {format_duration(seconds(runnable.restart_in))}")
    return "  ".join(parts)


def draw_tree(runnables: Sequence[Runnable]) -> list[str]:
    """The lines of the drawing; a runnable whose parent is not listed is a top."""
    listed = {runnable.dn for runnable in runnables}
    children: defaultdict[str, list[Runnable]] = defaultdict(list)
    tops = []
    for runnable in runnables:
        parent = runnable.dn.rpartition(".")[0]
        if parent in listed:
            children[parent].append(runnable)
        else:
            tops.append(runnable)
    lines: list[str] = []

    def draw(runnable: Runnable, name: str, lead: str, indent: str) -> None:
        lines.append(lead + describe(runnable, name))
        below = children[runnable.dn]
        for index, child in enumerate(below):
            last = index == len(below) - 1
            draw(
                child,
                child.dn.rpartition(".")[2],
                indent + (LAST_BRANCH if last else BRANCH),
                indent + (SPACE if last else PIPE),
            )

    for top in tops:
        draw(top, top.dn, "", "")
    return lines


def runnable_json(runnable: Runnable) -> dict[str, Any]:
    """``runnable`` for scripts, every field."""
    return {
        "dn": runnable.dn,
        "state": runnable.state,
        "restarts": runnable.restarts,
        "failures": runnable.failures,
        "last_error": runnable.last_error or None,
        "last_error_traceback": runnable.last_error_traceback or None,
        "since": timestamp_json(runnable.since, runnable.HasField("since")),
        "crash_looping": runnable.crash_looping,
        "restart_in": seconds(runnable.restart_in) if runnable.HasField("restart_in") else None,
        "note": runnable.note or None,
        "final": runnable.final,
    }


async def show_tree(session: Session, args: argparse.Namespace) -> None:
    """``ctl tree``."""
    from roleserve_core.proto import nodemanagement_pb2

    node = await session.node_client(args.node)
    request = nodemanagement_pb2.GetSupervisionTreeRequest(dn=args.dn)
    tree = await session.call(
        node.about("reading the supervision tree"), node.stub.GetSupervisionTree, request
    )
    if args.json:
        print_json([runnable_json(runnable) for runnable in tree.runnables])
    else:
        print("\n".join(draw_tree(tree.runnables)))


async def restart_runnable(session: Session, args: argparse.Namespace) -> None:
    """``ctl restart``."""
    from roleserve_core.proto import nodemanagement_pb2

    node = await session.node_client(args.node)
    request = nodemanagement_pb2.RestartRunnableRequest(dn=args.dn)
    await session.call(node.about(f"restarting {args.dn}"), node.stub.RestartRunnable, request)
    print(f"restarted {args.dn} on node {node.node.id}")
