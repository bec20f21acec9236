"""``ctl logs NODE [DN] [-f] [--no-subtree] [-n N]``: a node's log records, one a line.

::

    12:03:44.512 I root.role.heartbeat: beating every 5.0s
    12:03:49.020 W root.role.statuspush: curator unavailable; retrying

Local time with milliseconds, the level's initial, the DN, the message; an exception
follows on its own lines. The format is the log tree's (``LogEntry.format``), computed here
from the record's seconds and nanoseconds: going through a float would print ``.122`` for
a record logged at ``.123``.

By default a DN's whole subtree is read (``root`` and everything under it is every record
of the node), with every stored record first; ``-n`` limits the stored records, ``-f`` then
keeps the stream open for new ones until Ctrl-C (exit 0) or until the node ends it (it
stopped or restarted: said on stderr, exit 0). Where a follower fell behind and the node
dropped records, the node's gap marker is printed in place, as ``[gap]`` and its message.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from roleserve_core.cli.ctl import _command

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto import nodemanagement_pb2

__all__ = ["add_parsers", "format_entry", "show_logs"]

ALL_STORED = -1
"""``GetLogsRequest.backlog`` for every stored record."""

GAP = "[gap]"
"""Stands for the DN of a gap marker: the entry, without a DN, that the node sends where a
follower fell behind and lost records (see ``roleserve_core.service_nodemanagement``)."""


def add_parsers(commands: Any) -> None:
    """Register ``logs``."""
    parser = _command.add(
        commands,
        "logs",
        show_logs,
        without_leader=True,
        interruptible=True,
        description=(
            "Show the log records NODE stored for DN (default root) and, by default, every "
            "DN below it; with -f, keep printing new records until Ctrl-C."
        ),
    )
    _command.add_node_argument(parser)
    parser.add_argument("dn", metavar="DN", nargs="?", default="root", help="default: root")
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new records until Ctrl-C"
    )
    parser.add_argument(
        "--subtree",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also every DN below DN (default: yes)",
    )
    parser.add_argument(
        "-n",
        "--lines",
        metavar="N",
        type=_count,
        default=ALL_STORED,
        help="print only the last N stored records (default: all)",
    )


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of records (0 or more)")
    return int(text)


def format_entry(entry: nodemanagement_pb2.LogEntry) -> str:
    """``HH:MM:SS.mmm L dn: message``, then the exception, if any; a gap marker (no DN)
    as ``HH:MM:SS.mmm W [gap] message``."""
    stamp = time.strftime("%H:%M:%S", time.localtime(entry.time.seconds))
    millis = entry.time.nanos // 1_000_000
    level = logging.getLevelName(entry.level)[:1]
    source = f"{entry.dn}:" if entry.dn else GAP
    line = f"{stamp}.{millis:03d} {level} {source} {entry.message}"
    return f"{line}\n{entry.exception}" if entry.exception else line


async def show_logs(session: Session, args: argparse.Namespace) -> None:
    """``ctl logs``."""
    from roleserve_core.proto import nodemanagement_pb2

    node = await session.node_client(args.node)
    request = nodemanagement_pb2.GetLogsRequest(
        dn=args.dn, subtree=args.subtree, backlog=args.lines, follow=args.follow
    )
    batches = session.stream(
        node.about("reading the logs"), node.stub.GetLogs, request, follow=args.follow
    )
    async with contextlib.aclosing(batches):
        async for batch in batches:
            for entry in batch.entries:
                print(format_entry(entry))
            # Followed lines must reach a pipe (`| grep`) as they come, not at exit.
            sys.stdout.flush()
    if args.follow:
        print(f"{_command.PROG}: {node.node.id} ended the log stream", file=sys.stderr)
