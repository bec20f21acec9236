"""The ``roleserve`` command.

One sub-command per module: ``node`` runs a node, ``cluster`` a local cluster, ``plugins``
lists the installed plugins (``plugin_list``), ``plugin new`` writes a new one
(``plugin_new``), and ``ctl`` (a package, one module per concern) operates a cluster with an
operator's credentials.
Each module exposes ``add_parser(subparsers)``, which registers its sub-command with a
``handler(args) -> int`` default. ``COMMANDS`` lists them with their one-line help, and
only the chosen command's module is imported (``_lazy``): ``--version`` and ``--help``
import none of them, nor grpc or a plugin (tests/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from roleserve_core.cli._lazy import LazyCommand, add_lazy_subparsers
from roleserve_core.environment import DEBUG_ENV

# typing only for the annotations: the ``roleserve`` command imports this module at start,
# and importing ``typing`` costs it a tenth of the interpreter's start (benchmarks/cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS = (
    LazyCommand("node", "run this machine's node", "roleserve_core.cli.node:add_parser"),
    LazyCommand(
        "cluster",
        "a local cluster of node processes, for trying roleserve and testing plugins",
        "roleserve_core.cli.cluster:add_parser",
    ),
    LazyCommand(
        "plugins",
        "list installed plugins and what each contributes",
        "roleserve_core.cli.plugin_list:add_parser",
    ),
    LazyCommand("plugin", "create a new plugin", "roleserve_core.cli.plugin_new:add_parser"),
    LazyCommand(
        "ctl",
        "operate a cluster: nodes, roles, tickets, logs",
        "roleserve_core.cli.ctl:add_parser",
    ),
)
"""The commands, in the order ``roleserve --help`` lists them, each with the module that
registers it: imported only when it is chosen."""


class _Version(argparse.Action):
    """``--version``, reading the installed version only when asked: argparse's own action
    wants it at start. Read from the metadata directory (``_installed``), as importing
    ``importlib.metadata`` costs twice the interpreter's start; through it only when that
    finds none."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from roleserve_core.cli._installed import version
        from roleserve_core.version import CORE_DISTRIBUTION, core_version

        print(f"roleserve {version(CORE_DISTRIBUTION) or core_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``roleserve`` command."""
    parser = argparse.ArgumentParser(
        prog="roleserve",
        description=(
            "roleserve: a node agent. It enrols a machine into a cluster, watches the roles "
            "the control plane assigns to it, and runs the services those roles need."
        ),
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of every error, not only of bugs (also ${DEBUG_ENV}=1)",
    )
    add_lazy_subparsers(parser, COMMANDS, title="commands", metavar="COMMAND", dest="command")
    return parser


GRPC_VERBOSITY_ENV = "GRPC_VERBOSITY"
"""gRPC's own: the least severe of its C core's lines it writes to stderr."""


def _quiet_grpc(command: str | None, *, debug: bool) -> None:
    """Keep gRPC's C core off the terminal, unless ``--debug``.

    It writes lines of its own to stderr: a "Handshake failed" for each try at a curator
    of another cluster, a "Got goaway" for every open call when a curator stops. What
    matters of them reaches the command's own message or the node's log, so a command at a
    terminal shows none, and a node's log (``node run``) keeps gRPC's errors. Set before
    grpc loads (no command imports it before this); the operator's own setting wins.
    """
    if GRPC_VERBOSITY_ENV in os.environ:
        return
    if debug:
        os.environ[GRPC_VERBOSITY_ENV] = "INFO"
    else:
        os.environ[GRPC_VERBOSITY_ENV] = "ERROR" if command == "node" else "NONE"


def _offload_encryption() -> None:
    """A node's curator, when it leads, sends each change to every node's stream: let its
    server encrypt and write them off the event loop (``rpc._offload``). Set before grpc
    loads, as ``_quiet_grpc``; imported here, so that other commands do not load ``rpc``."""
    from roleserve_core.rpc import enable_encryption_offload

    enable_encryption_offload()


READER_GONE = 0
"""The exit code when stdout's reader went away (``ctl tree NODE | head -1``): the
command did what was asked, and the reader chose to see less of it. Not 1, Python's own
(a failure), nor 141, a C tool's killed by SIGPIPE: both depend on timing, on whether the
output fitted the pipe's buffer before the reader left, so the same pipeline would pass or
fail under ``set -o pipefail`` by chance. Always 0, as ripgrep does."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``roleserve`` command; returns the exit code.

    Every command's output is flushed here, so that a reader that went away (``... |
    head``) ends every command in this one place, quietly, with ``READER_GONE``: at its
    write, or at this flush (otherwise at Python's own at exit, which prints a traceback).
    """
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        from roleserve_core.cli._failure import discard_stdout

        discard_stdout()
        return READER_GONE


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_grpc(args.command, debug=args.debug)
    if args.command == "node":
        _offload_encryption()
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    if args.debug:
        os.environ[DEBUG_ENV] = "1"  # for the node processes `cluster up` starts, too
    from roleserve_core.cli._failure import report, sole_error
    from roleserve_core.errors import RoleserveError

    try:
        with sole_error():
            code: int = handler(args)
    except RoleserveError as error:  # a refusal the command did not report itself
        report(f"roleserve {args.command}", error)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
