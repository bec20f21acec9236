"""``ctl values NODE``: the node's value registry, one row a value.

A value's ``current`` is the node's ``repr()``, already shortened by the node; the table
shortens it further to keep one line a value, and ``--json`` keeps what the node sent.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._table import render_table
from roleserve_core.cli.ctl import _command
from roleserve_core.cli.ctl._format import NONE, print_json, shorten, timestamp_json

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto import nodemanagement_pb2

__all__ = ["CURRENT_WIDTH", "add_parsers", "show_values", "value_json", "value_row"]

HEADERS = ("NAME", "OWNER", "SET", "SETS", "CURRENT")
CURRENT_WIDTH = 60
"""Characters of the current value in the table."""


def add_parsers(commands: Any) -> None:
    """Register ``values``."""
    parser = _command.add(
        commands,
        "values",
        show_values,
        help="show a node's values",
        description=(
            "Show the values of NODE's registry, the state its workers share: owner, "
            "whether it is set, how often it was set, and its current value (shortened)."
        ),
    )
    _command.add_node_argument(parser)
    _command.add_json_option(parser)


def value_row(value: nodemanagement_pb2.Value) -> list[str]:
    """The table row of ``value``, in ``HEADERS`` order."""
    current = shorten(value.current, CURRENT_WIDTH) if value.is_set else NONE
    return [
        value.name,
        value.owner or NONE,
        "yes" if value.is_set else "no",
        str(value.sets),
        current,
    ]


def value_json(value: nodemanagement_pb2.Value) -> dict[str, Any]:
    """``value`` for scripts, every field."""
    return {
        "name": value.name,
        "type": value.type,
        "doc": value.doc,
        "owner": value.owner or None,
        "readers": list(value.readers),
        "is_set": value.is_set,
        "sets": value.sets,
        "watchers": value.watchers,
        "last_changed": timestamp_json(value.last_changed, value.HasField("last_changed")),
        "current": value.current if value.is_set else None,
    }


async def show_values(session: Session, args: argparse.Namespace) -> None:
    """``ctl values``."""
    from roleserve_core.proto import nodemanagement_pb2

    node = await session.node_client(args.node)
    response = await session.call(
        node.about("reading the values"),
        node.stub.GetValues,
        nodemanagement_pb2.GetValuesRequest(),
    )
    if args.json:
        print_json([value_json(value) for value in response.values])
    else:
        print(render_table(HEADERS, [value_row(value) for value in response.values]))
