"""``ctl plugins NODE``: the plugins a node started with, and which of them failed.

Read from the status the node reports to the curator (``NodeStatus.plugins``), not from
the node's own NodeManagement API: it works for any node the curator lists, even one whose
``nodemgmt`` is disabled or which cannot be reached, and ``ctl nodes`` marks a node with a
failed plugin from the same listing. The price: it shows the node as it last reported,
which is as it started, since a plugin's state is settled then.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._format import NONE, print_json
from roleserve_core.cli._table import output_width, render_table
from roleserve_core.cli.ctl import _command
from roleserve_core.cli.ctl._errors import EXIT_REFUSED, CtlError

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session
    from roleserve_core.proto import common_pb2

__all__ = ["add_parsers", "plugin_json"]

HEADERS = ("NAME", "VERSION", "STATE", "ERROR")
NOTES = ("ERROR",)
"""Under its row, wrapped, when the table is too wide: an error cut short hides why."""


def add_parsers(commands: Any) -> None:
    """Register ``plugins``."""
    parser = _command.add(
        commands,
        "plugins",
        list_plugins,
        description=(
            "List the plugins of NODE as it reported them to the curator when it started: "
            "name, version, state (loaded; failed: the node started without it, ERROR says "
            "why; blocked: left out by ROLESERVE_PLUGINS or ROLESERVE_DISABLE_PLUGINS, "
            "ERROR says which) and error. `ctl nodes` marks a node with a failed plugin "
            "with '!'."
        ),
    )
    _command.add_node_argument(parser)
    _command.add_json_option(parser)


def plugin_json(plugin: common_pb2.PluginStatus) -> dict[str, Any]:
    """One plugin for scripts: ``version`` and ``error`` are null when the node gave none."""
    return {
        "name": plugin.name,
        "version": plugin.version or None,
        "state": plugin.state,
        "error": plugin.error or None,
    }


async def list_plugins(session: Session, args: argparse.Namespace) -> None:
    """``ctl plugins NODE [--json]``."""
    node = await session.resolve(args.node)
    plugins = node.status.plugins
    if not plugins:
        raise CtlError(
            f"{node.id} has reported no plugins: it has not reported its status since it "
            "started, or runs a roleserve that does not report them",
            EXIT_REFUSED,
        )
    if args.json:
        print_json([plugin_json(plugin) for plugin in plugins])
        return
    rows = [
        [plugin.name, plugin.version or NONE, plugin.state, plugin.error or NONE]
        for plugin in plugins
    ]
    print(render_table(HEADERS, rows, width=output_width(), notes=NOTES))
