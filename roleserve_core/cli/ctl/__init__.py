"""``roleserve ctl``: operate a cluster with a user's credentials (the owner's, or scoped
ones the owner issued: ``credentials issue``).

::

    roleserve ctl [--credentials DIR] [--endpoint HOST[:PORT] ...] [--timeout S] COMMAND
        │
        ├─ access directory ─▶ find_leader ─▶ Management (leading curator, port 7835)
        │     nodes  plugins  approve  decommission  roles set|unset  ticket  leader
        │     consensus  whoami  credentials issue|list|revoke
        │     and plugins' sub-commands (kubeconfig, prometheus-config: ``_plugins``)
        │
        └─ GetNodes: NODE (ID or unique prefix) ─▶ its address ─▶ NodeManagement (7839)
              tree  restart  values  logs  metrics

Modules, one concern each: ``_command`` (options, the handler every sub-command shares),
``_session`` (channels and calls), ``_errors`` (exit codes, one-line failures), ``_resolve``
(node prefixes), then one module per group of sub-commands:
``_nodes``, ``_node_plugins`` (a node's plugins), ``_roles``, ``_ticket``, ``_consensus``,
``_tree``, ``_values``, ``_logs``, ``_metrics``, ``_credentials``; ``_plugin_commands``
adds the sub-commands that plugins contribute (entry-point group ``roleserve.ctl``, loaded
only when run: the kubernetes plugin's ``kubeconfig``, the metrics plugin's
``prometheus-config``).

Every sub-command prints a table (or plain lines) for people and, where it lists things,
``--json`` for scripts. Every failure is one line on stderr, ``roleserve ctl: error: ...``,
with exit 1 if the cluster refused or could not be reached and 2 if the command cannot be
run as given (see ``_errors``). ``docs/ctl.md`` is the operator's reference.

What ``cluster up|status`` shares with these is one level up, in ``cli``: ``_format``
(cells and JSON), ``_table`` (tables) and ``_node_display`` (a node's row, its words, the
lines under a table of nodes, its JSON: ``nodes`` and ``cluster status`` show nodes alike).
"""

from __future__ import annotations

import argparse
from typing import Any

from roleserve_core.cli.ctl import (
    _consensus,
    _credentials,
    _logs,
    _metrics,
    _node_plugins,
    _nodes,
    _plugin_commands,
    _roles,
    _ticket,
    _tree,
    _values,
)
from roleserve_core.cli.ctl._command import add_connection_options

__all__ = ["add_parser"]

SUBCOMMAND_MODULES = (
    _nodes,
    _node_plugins,
    _roles,
    _ticket,
    _consensus,
    _tree,
    _values,
    _logs,
    _metrics,
    _credentials,
)
"""In the order ``roleserve ctl --help`` lists their sub-commands."""


def add_parser(commands: Any) -> None:
    """Register ``roleserve ctl`` and its sub-commands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "ctl",
        help="operate a cluster: nodes, roles, tickets, logs",
        description=(
            "Operate a cluster with an operator's credentials, read from an access "
            "directory: --credentials DIR, else $ROLESERVE_CREDENTIALS, else "
            "~/.config/roleserve/owner (which `roleserve node run --bootstrap` writes). "
            "Connection options may also follow the sub-command."
        ),
    )
    add_connection_options(parser, suppress=False)
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for module in SUBCOMMAND_MODULES:
        module.add_parsers(subcommands)
    _plugin_commands.add_parsers(subcommands)  # last: a plugin's command never shadows the core's
