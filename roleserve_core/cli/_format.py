"""Turning wire messages into what people read (table cells) and what scripts read (JSON).

Each command (every ``ctl`` sub-command, ``cluster status``) prints either a table, through
``render_table``, or JSON, through ``print_json``; the helpers here keep the cells of every
command alike: enum names without their prefixes, ``-`` for nothing, ages as ``2.1s ago``,
roles as ``has()`` spells them. A node's own words (its state, its health) are
``_node_display``'s.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from roleserve_core.text import cut

if TYPE_CHECKING:
    from google.protobuf.duration_pb2 import Duration
    from google.protobuf.timestamp_pb2 import Timestamp

    from roleserve_core.proto import common_pb2
    from roleserve_core.roles import NodeRoles

__all__ = [
    "NONE",
    "enum_name",
    "format_age",
    "format_duration",
    "format_roles",
    "format_roles_message",
    "print_json",
    "role_parameters",
    "roles_json",
    "seconds",
    "shorten",
    "timestamp_json",
]

NONE = "-"
"""The cell of a field that has no value: a blank cell would shift the eye to the next."""


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout: the ``--json`` output of every sub-command."""
    print(json.dumps(data, indent=2))
    sys.stdout.flush()


def enum_name(name_of: Callable[[Any], str], value: int, prefix: str) -> str:
    """The name of an enum ``value`` without ``prefix``, or the number for a value newer
    than this client's protos: a newer server must not make the listing fail."""
    try:
        return name_of(value).removeprefix(prefix)
    except ValueError:
        return str(value)


def seconds(duration: Duration) -> float:
    """A protobuf duration in seconds, exactly as far as a float goes."""
    return duration.seconds + duration.nanos / 1e9


def format_duration(value: float) -> str:
    """``2.1s``, ``3m12s``, ``2h05m``: short enough for a column, precise where it matters
    (a heartbeat a few seconds old), coarse where it does not."""
    if value < 60:
        return f"{value:.1f}s"
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_age(value: float | None) -> str:
    """``2.1s ago``, or ``-`` if there is nothing to be old."""
    return NONE if value is None else f"{format_duration(value)} ago"


def role_parameters(roles: NodeRoles, name: str) -> Mapping[str, str]:
    """The parameters of the role ``name`` (as ``names()`` spells it): a custom role's,
    or none for a built-in role, whose parameters the curator fills in, not the operator."""
    if name.startswith("custom:"):
        return roles.custom[name.removeprefix("custom:")]
    return {}


def format_roles(roles: NodeRoles) -> str:
    """``kubernetes_worker, custom:backup(schedule=daily)``, or ``-`` for no roles.

    Custom roles show their parameters: two nodes with the same role but different
    parameters do different things.
    """
    cells = []
    for name in roles.names():
        parameters = role_parameters(roles, name)
        pairs = ",".join(f"{key}={value}" for key, value in sorted(parameters.items()))
        cells.append(f"{name}({pairs})" if pairs else name)
    return ", ".join(cells) if cells else NONE


def format_roles_message(message: common_pb2.NodeRoles) -> str:
    """``format_roles`` of the roles on the wire."""
    from roleserve_core.roles import roles_from_proto

    return format_roles(roles_from_proto(message))


def roles_json(message: common_pb2.NodeRoles) -> dict[str, dict[str, str]]:
    """Role name → parameters (empty for built-in roles), as ``names()`` spells the names."""
    from roleserve_core.roles import roles_from_proto

    roles = roles_from_proto(message)
    return {name: dict(role_parameters(roles, name)) for name in roles.names()}


def shorten(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters, ``…`` marking a cut."""
    return cut(" ".join(text.split()), width)


def timestamp_json(stamp: Timestamp, present: bool) -> str | None:
    """ISO 8601 in UTC, or None if the field is unset (``present`` is its ``HasField``)."""
    if not present:
        return None
    moment = datetime.datetime.fromtimestamp(stamp.seconds, datetime.UTC)
    moment += datetime.timedelta(microseconds=stamp.nanos // 1000)
    return moment.isoformat()
