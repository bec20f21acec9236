"""``roleserve node run``: run this machine's node.

The first start says how the node enters a cluster: ``--bootstrap`` (a new cluster) or
``--register TICKET --join-address HOST`` (an existing one, once an operator approves it).
Every later start needs only ``--data-dir``: the node rejoins with what it saved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from roleserve_core.cli import node_config
from roleserve_core.cli._failure import report, sole_error
from roleserve_core.config import LOG_LEVELS
from roleserve_core.daemon import NodeOptions, run_node
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment import EnrolmentRequest
from roleserve_core.errors import NodeSetupError, PluginError

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    """Register ``roleserve node``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "node",
        help="run this machine's node",
        description="Run a roleserve node on this machine.",
    )
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND")
    run = subcommands.add_parser(
        "run",
        help="run the node until SIGTERM or Ctrl-C",
        description=(
            "Run the node: enrol it (first start only), follow the roles the control plane "
            "gives it, and run the workers of every installed plugin. The first start needs "
            "--bootstrap or --register; later starts need only --data-dir. Plugin settings "
            "live in DATA_DIR/roleserve.toml ([plugins.NAME] sections). SIGTERM or Ctrl-C "
            "stops every runnable and child process, then exits 0."
        ),
    )
    run.add_argument(
        "--data-dir", required=True, type=Path, help="the node's data directory (created)"
    )
    first = run.add_argument_group("first start (one of)")
    first.add_argument(
        "--bootstrap", action="store_true", help="create a new cluster with this node"
    )
    first.add_argument(
        "--register",
        metavar="TICKET",
        help="join a cluster with a ticket from `roleserve ctl ticket`; needs --join-address",
    )
    run.add_argument(
        "--join-address",
        metavar="HOST[:PORT]",
        action="extend",
        nargs="+",
        default=[],
        help="a curator of the cluster to register through (port 7835 if not given)",
    )
    run.add_argument(
        "--owner-credentials",
        metavar="DIR",
        type=Path,
        help="with --bootstrap: where to write the owner's credentials "
        "(default ~/.config/roleserve/owner)",
    )
    run.add_argument(
        "--address", help="the IP address other nodes reach this node at (default: detected)"
    )
    run.add_argument("--log-level", choices=LOG_LEVELS, help="default: info, or roleserve.toml")
    run.add_argument(
        "--strict-plugins",
        action="store_true",
        default=None,
        help="stop if any plugin fails to load (default: report it and go on)",
    )
    run.set_defaults(handler=_run)
    node_config.add_subparser(subcommands)
    parser.set_defaults(handler=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    options = NodeOptions(
        datadir=NodeDataDirectory(args.data_dir),
        enrolment=EnrolmentRequest(
            bootstrap=args.bootstrap,
            owner_credentials=args.owner_credentials,
            ticket=args.register,
            join_addresses=tuple(args.join_address),
        ),
        address=args.address,
        log_level=args.log_level,
        strict_plugins=args.strict_plugins,
    )
    try:
        with sole_error():
            return run_node(options)
    except (NodeSetupError, PluginError) as exc:
        report("roleserve node", exc)
        return 2
