"""``roleserve ctl``: operate a cluster with a user's credentials (the owner's, or scoped
ones the owner issued: ``credentials issue``).

::

    roleserve ctl [--credentials DIR] [--endpoint HOST[:PORT] ...] [--timeout S] COMMAND
        │
        ├─ access directory ─▶ its remembered leader, else find_leader
        │     ─▶ Management (leading curator, port 7835)
        │     nodes  plugins  approve  decommission  roles set|unset  ticket  leader
        │     consensus  whoami  credentials issue|list|revoke
        │     and plugins' sub-commands (kubeconfig, prometheus-config: ``_plugins``)
        │
        └─ GetNodes: NODE (ID or unique prefix) ─▶ its address ─▶ NodeManagement (7839)
              tree  restart  values  logs  metrics

Modules, one concern each: ``_options`` (the connection options), ``_command`` (the
handler every sub-command shares),
``_session`` (channels and calls), ``_errors`` (exit codes, one-line failures), ``_resolve``
(node prefixes), then one module per group of sub-commands:
``_nodes``, ``_node_plugins`` (a node's plugins), ``_roles``, ``_ticket``, ``_consensus``,
``_tree``, ``_values``, ``_logs``, ``_metrics``, ``_credentials``; ``_plugin_commands``
adds the sub-commands that plugins contribute (entry-point group ``roleserve.ctl``, loaded
only when run: the kubernetes plugin's ``kubeconfig``, the metrics plugin's
``prometheus-config``). ``SUBCOMMANDS`` lists the core's sub-commands with their module:
``ctl --help`` imports none of them, ``ctl nodes`` only ``_nodes`` (``cli._lazy``).

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

from roleserve_core.cli._lazy import LazyCommand, add_lazy_subparsers
from roleserve_core.cli.ctl._options import add_connection_options

# typing only for the annotations: the ``roleserve`` command imports this module at start,
# and importing ``typing`` costs it a tenth of the interpreter's start (benchmarks/cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SUBCOMMANDS", "add_parser"]


def _in(module: str, *commands: tuple[str, str]) -> list[LazyCommand]:
    """``commands`` (name, one-line help), registered by ``module``'s ``add_parsers``."""
    register = f"roleserve_core.cli.ctl.{module}:add_parsers"
    return [LazyCommand(name, help, register) for name, help in commands]


SUBCOMMANDS = (
    *_in(
        "_nodes",
        ("nodes", "list the cluster's nodes"),
        ("approve", "let a new node join"),
        ("decommission", "remove a node from the cluster for good"),
    ),
    *_in("_node_plugins", ("plugins", "list a node's plugins and which of them failed")),
    *_in("_roles", ("roles", "assign or remove a node's roles")),
    *_in("_ticket", ("ticket", "print the ticket new nodes register with")),
    *_in(
        "_consensus",
        ("leader", "show the leading curator"),
        ("consensus", "list the etcd members"),
    ),
    *_in(
        "_tree",
        ("tree", "show a node's supervision tree"),
        ("restart", "restart a runnable on a node"),
    ),
    *_in("_values", ("values", "show a node's values")),
    *_in("_logs", ("logs", "show a node's logs")),
    *_in("_metrics", ("metrics", "show a node's key figures (without Prometheus)")),
    *_in(
        "_credentials",
        ("whoami", "show whose credentials these are, their scope and expiry"),
        ("credentials", "issue, list and revoke scoped user credentials (owner only)"),
    ),
)
"""The core's sub-commands, in the order ``roleserve ctl --help`` lists them, each with
the module that registers it: imported only when it is chosen (``_lazy``)."""


def add_parser(commands: Any) -> None:
    """Register ``roleserve ctl`` and its sub-commands (each built when chosen)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "ctl",
        description=(
            "Operate a cluster with an operator's credentials, read from an access "
            "directory: --credentials DIR, else $ROLESERVE_CREDENTIALS, else "
            "~/.config/roleserve/owner (which `roleserve node run --bootstrap` writes). "
            "Connection options may also follow the sub-command."
        ),
    )
    add_connection_options(parser, suppress=False)
    # The plugins' commands last, and only when every name is needed: a plugin's command
    # never shadows the core's, and ``ctl nodes`` reads no entry point.
    add_lazy_subparsers(
        parser,
        SUBCOMMANDS,
        more=_add_plugin_commands,
        title="commands",
        metavar="COMMAND",
        required=True,
    )


def _add_plugin_commands(commands: Any) -> None:
    """The plugins' sub-commands (``_plugin_commands``), read from their entry points."""
    from roleserve_core.cli.ctl import _plugin_commands

    _plugin_commands.add_parsers(commands)
