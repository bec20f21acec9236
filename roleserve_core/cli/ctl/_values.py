"""``ctl values NODE [NAME]``: the node's value registry, one row a value; or one value in
full.

A value's ``current`` is the node's ``repr()``, already shortened by the node; the table
shortens it further to keep one line a value, and ``--json`` keeps what the node sent.
With NAME, the node sends that value's ``details`` (its ``details()``, else its ``repr``
pretty-printed), printed whole under its name, owner and meaning.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import NONE, print_json, shorten, timestamp_json
from roleserve_core.cli._table import output_width, render_table
from roleserve_core.cli.ctl import _command

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto import nodemanagement_pb2

__all__ = [
    "CURRENT_WIDTH",
    "add_parsers",
    "show_values",
    "value_json",
    "value_row",
    "value_text",
]

HEADERS = ("NAME", "OWNER", "SET", "SETS", "CURRENT")
CURRENT_WIDTH = 60
"""Characters of the current value in the table."""


def add_parsers(commands: Any) -> None:
    """Register ``values``."""
    parser = _command.add(
        commands,
        "values",
        show_values,
        without_leader=True,
        description=(
            "Show the values of NODE's registry, the state its workers share: owner, "
            "whether it is set, how often it was set, and its current value (shortened). "
            "With NAME, that one value in full."
        ),
    )
    _command.add_node_argument(parser)
    parser.add_argument(
        "name", nargs="?", metavar="NAME", help="one value to show in full (e.g. roles)"
    )
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
        "details": value.details or None,
    }


async def show_values(session: Session, args: argparse.Namespace) -> None:
    """``ctl values``."""
    from roleserve_core.proto import nodemanagement_pb2

    node = await session.node_client(args.node)
    response = await session.call(
        node.about(f"reading the value {args.name}" if args.name else "reading the values"),
        node.stub.GetValues,
        nodemanagement_pb2.GetValuesRequest(name=args.name or ""),
    )
    if args.json:
        values = [value_json(value) for value in response.values]
        print_json(values[0] if args.name else values)
    elif args.name:
        print(value_text(response.values[0]))
    else:
        rows = [value_row(value) for value in response.values]
        print(render_table(HEADERS, rows, width=output_width()))


def value_text(value: nodemanagement_pb2.Value) -> str:
    """One value in full: a heading line, its meaning, then the value itself."""
    heading = f"{value.name} ({value.type}, owned by {value.owner or NONE}, set {value.sets}×)"
    shown = value.details if value.is_set else "not set"
    return f"{heading}\n{value.doc}\n\n{shown}"
