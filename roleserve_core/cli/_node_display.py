"""How a node is shown: its row of a table, the lines under the table, its JSON.

Two commands show nodes as the leading curator knows them, and show them alike:
``ctl nodes`` (a row per node it lists) and ``cluster up|status`` (a row per local node
process, with the process's columns before the node's and the plugins' after)::

    management_pb2.Node ─┬─▶ node_row ───────────▶ NodeTable.add ─▶ NodeTable.render
    (or none: unlisted) ─┘                          (columns around   (table, then what its
                                                     the node's)       marks say: CONFLICT, !)
    management_pb2.Node ───▶ node_json ──────────▶ --json

So the columns, the state and health words, the marks and the lines that explain them are
said once, here; each command adds only what is its own. The cells themselves are made
the way every command makes them (``_format``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import (
    NONE,
    enum_name,
    format_age,
    format_roles_message,
    roles_json,
    seconds,
)
from roleserve_core.cli._invocation import roleserve_command
from roleserve_core.cli._table import fill, render_table

if TYPE_CHECKING:
    from roleserve_core.proto import common_pb2, management_pb2

__all__ = [
    "FAILED_PLUGIN_MARK",
    "HEADERS",
    "NOTES",
    "PLUGIN_FAILED",
    "STATES",
    "NodeTable",
    "failed_plugins",
    "health_name",
    "node_json",
    "node_row",
    "state_name",
]

STATES = ("NEW", "STANDBY", "UP", "DECOMMISSIONED")
"""The life-cycle states as the STATE column spells them (and ``ctl nodes --state``)."""
HEADERS = ("", "ID", "ADDRESS", "STATE", "ROLES", "HEALTH", "HEARTBEAT")
"""The first column holds ``*`` for the node whose curator leads."""
FAILED_PLUGIN_MARK = "!"
"""After the health of a node that started without a plugin that failed at its start."""
NOTES = ("ROLES",)
"""Under each row instead, when the table is wider than the terminal (``render_table``)."""


PLUGIN_FAILED = "failed"
"""``PluginStatus.state`` of a plugin that failed (common.proto; the node sends
``plugin_loader.PluginState.FAILED``): the wire's word, so that showing a node imports
neither the plugin loader nor pluggy."""


def state_name(state: common_pb2.NodeState.ValueType) -> str:
    """``UP`` for ``NODE_STATE_UP``; the prefix says nothing in a STATE column."""
    from roleserve_core.proto import common_pb2

    return enum_name(common_pb2.NodeState.Name, state, "NODE_STATE_")


def health_name(health: management_pb2.Node.Health.ValueType) -> str:
    """``HEALTHY``, ``HEARTBEAT_TIMEOUT`` or ``UNKNOWN``."""
    from roleserve_core.proto import management_pb2

    return enum_name(management_pb2.Node.Health.Name, health, "HEALTH_")


def failed_plugins(node: management_pb2.Node) -> list[str]:
    """The names of the plugins ``node`` reports failed."""
    return [plugin.name for plugin in node.status.plugins if plugin.state == PLUGIN_FAILED]


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


def _unlisted_row(node_id: str, address: str) -> list[str]:
    """The row of a node the leader does not list (not registered yet, or no leader
    answered): what is known without it, ``-`` for the rest."""
    return ["", node_id or NONE, address, *[NONE] * (len(HEADERS) - 3)]


def _health(node: management_pb2.Node) -> str:
    """The heartbeat's health, marked if a plugin failed: the node is alive, but not all
    of it runs, which the health alone would hide."""
    mark = FAILED_PLUGIN_MARK if failed_plugins(node) else ""
    return health_name(node.health) + mark + (", CONFLICT" if node.conflict else "")


def _failed_plugin_lines(nodes: Sequence[management_pb2.Node]) -> list[str]:
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


def _conflict_lines(nodes: Sequence[management_pb2.Node]) -> list[str]:
    """One line under the table per node that two processes claim: the table's CONFLICT
    says that something is wrong, the line says what the curator saw."""
    return [f"{node.id}: CONFLICT: {node.conflict}" for node in nodes if node.conflict]


def _heartbeat_age(node: management_pb2.Node) -> float | None:
    if not node.HasField("time_since_heartbeat"):
        return None
    return seconds(node.time_since_heartbeat)


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


@dataclass
class NodeTable:
    """A table of nodes: the node's columns (``HEADERS``), with a command's own columns
    ``before`` and ``after`` them, and under it the lines that say what its marks mean
    (which plugins a ``!`` stands for, where a CONFLICT came from): a mark alone does not
    say what was seen.
    """

    before: Sequence[str] = ()
    after: Sequence[str] = ()
    _rows: list[list[str]] = field(default_factory=list, init=False)
    _listed: list[management_pb2.Node] = field(default_factory=list, init=False)

    def add(
        self,
        node: management_pb2.Node | None,
        *,
        before: Sequence[str] = (),
        after: Sequence[str] = (),
        node_id: str = "",
        address: str = "",
    ) -> None:
        """A row: ``node`` as the leader lists it between the command's cells, or, for a
        node it does not list (None), the ``node_id`` and ``address`` known without it."""
        cells = node_row(node) if node is not None else _unlisted_row(node_id, address)
        self._rows.append([*before, *cells, *after])
        if node is not None:
            self._listed.append(node)

    def render(self, width: int | None, lines: Sequence[str | None] = ()) -> str:
        """The table fitted to ``width`` (``output_width()``), then the lines explaining
        its marks, then the command's own ``lines`` (None: no line)."""
        headers = (*self.before, *HEADERS, *self.after)
        table = render_table(headers, self._rows, width=width, notes=NOTES)
        under = [*_conflict_lines(self._listed), *_failed_plugin_lines(self._listed), *lines]
        return "\n".join([table, *(fill(line, width) for line in under if line is not None)])
