"""``roleserve node run``: run this machine's node.

The first start says how the node enters a cluster: ``--bootstrap`` (a new cluster) or a
register ticket and ``--join-address HOST`` (an existing one, once an operator approves it).
Every later start needs only ``--data-dir``: the node rejoins with what it saved.

The ticket lets whoever holds it register a node, so it is a secret, and the command line
is no place for one: every local user sees it in ``ps``. ``--register-file PATH`` and
``$ROLESERVE_REGISTER_TICKET`` keep it out of sight; ``--register TICKET`` stays for trying
things out. The variable is removed from the environment as soon as it is read, so no
program the node starts (etcd) inherits it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from roleserve_core.cli import node_config_check
from roleserve_core.cli._failure import report, sole_error
from roleserve_core.config import LOG_LEVELS
from roleserve_core.environment import REGISTER_TICKET_ENV
from roleserve_core.errors import ConfigError, NodeSetupError, PluginError

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    """Register ``roleserve node``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "node",
        description="Run a roleserve node on this machine.",
    )
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND")
    run = subcommands.add_parser(
        "run",
        help="run the node until SIGTERM or Ctrl-C",
        description=(
            "Run the node: enrol it (first start only), follow the roles the control plane "
            "gives it, and run the workers of every installed plugin. The first start needs "
            "--bootstrap, or a register ticket (--register-file, $ROLESERVE_REGISTER_TICKET or "
            "--register) and --join-address; later starts need only --data-dir. Plugin settings "
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
    ticket = first.add_mutually_exclusive_group()
    ticket.add_argument(
        "--register-file",
        metavar="PATH",
        type=Path,
        help=(
            "join a cluster with the ticket `roleserve ctl ticket` prints, read from PATH; "
            f"needs --join-address. ${REGISTER_TICKET_ENV} holding the ticket does the same"
        ),
    )
    ticket.add_argument(
        "--register",
        metavar="TICKET",
        help=(
            "the same with the ticket itself, which every local user then sees in `ps`: "
            f"prefer --register-file or ${REGISTER_TICKET_ENV}"
        ),
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
        "--log-file",
        metavar="PATH",
        type=Path,
        help="log into PATH, rotated by size as roleserve.toml's [node] log_max_bytes and "
        "log_files say (default 10 MiB, 5 files); default: roleserve.toml's log_file, else "
        "stderr (for the journal under a service manager)",
    )
    run.add_argument(
        "--strict-plugins",
        action="store_true",
        default=None,
        help="stop if any plugin fails to load (default: report it and go on)",
    )
    run.set_defaults(handler=_run)
    node_config_check.add_subparser(subcommands)
    parser.set_defaults(handler=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    # Imported here: `roleserve --help` registers this command without loading the node.
    from roleserve_core.daemon import NodeOptions, run_node
    from roleserve_core.datadir import NodeDataDirectory
    from roleserve_core.enrolment import EnrolmentRequest

    try:
        ticket, source = register_ticket(args.register, args.register_file)
        options = NodeOptions(
            datadir=NodeDataDirectory(args.data_dir),
            enrolment=EnrolmentRequest(
                bootstrap=args.bootstrap,
                owner_credentials=args.owner_credentials,
                ticket=ticket,
                ticket_source=source,
                join_addresses=tuple(args.join_address),
            ),
            address=args.address,
            log_level=args.log_level,
            log_file=args.log_file,
            strict_plugins=args.strict_plugins,
        )
        with sole_error():
            return run_node(options)
    except (NodeSetupError, PluginError) as exc:
        report("roleserve node", exc)
        return 2


def register_ticket(given: str | None, path: Path | None) -> tuple[str | None, str]:
    """The register ticket (None without one) and where it came from: ``--register``,
    else ``--register-file``, else ``$ROLESERVE_REGISTER_TICKET`` (see the module
    docstring; the variable is removed from the environment either way).

    :raises ConfigError: if the file cannot be read or is empty.
    """
    variable = os.environ.pop(REGISTER_TICKET_ENV, "").strip()
    if given is not None:
        return given, "--register"
    if path is None:
        return variable or None, f"${REGISTER_TICKET_ENV}"
    source = f"--register-file {path}"
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not text"
        raise ConfigError(
            f"{source}: cannot read it ({reason}); save the ticket with "
            f"`roleserve ctl ticket > {path}`"
        ) from None
    if not text:
        raise ConfigError(
            f"{source}: the file is empty; save the ticket with `roleserve ctl ticket > {path}`"
        )
    return text, source
