"""What every ``roleserve ctl`` sub-command shares: its options, its session, its errors.

A sub-command is an async function ``run(session, args)`` that prints its result. ``add``
registers it with the connection options and a handler that does the rest, the same way
for every sub-command::

    handler(args)
      ├─ access directory (CredentialsError ─▶ exit 2)
      └─ anyio.run: open_session ─▶ run(session, args)
           CtlError ─▶ its line and exit code; NoLeaderError, gRPC errors ─▶ exit 1
           NoQuorumError ─▶ its line, with `cluster up --dir D` for a local cluster's D/owner
           Ctrl-C ─▶ 130, or 0 where following is the point

The connection options are ``_options``'s, accepted before and after the sub-command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from roleserve_core.access import (
    CREDENTIALS_ENV,
    ClusterAccess,
    checked_credentials,
    resolve_access_directory,
)
from roleserve_core.cli._failure import report, sole_error
from roleserve_core.cli.ctl import _local
from roleserve_core.cli.ctl._errors import (
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_USAGE,
    CtlError,
    rpc_failure,
)
from roleserve_core.cli.ctl._options import DEFAULT_TIMEOUT, PROG, add_connection_options
from roleserve_core.errors import CredentialsError, RoleserveError
from roleserve_core.localcluster.layout import default_cluster_directory

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session

__all__ = [
    "DEFAULT_TIMEOUT",
    "PROG",
    "Run",
    "add",
    "add_connection_options",
    "add_json_option",
    "add_node_argument",
]

Run: TypeAlias = "Callable[[Session, argparse.Namespace], Awaitable[None]]"
"""A sub-command: prints its result, raises ``CtlError`` when it cannot."""


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json``: scripts get JSON on stdout, people a table."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_node_argument(parser: argparse.ArgumentParser) -> None:
    """The NODE argument, resolved by ``Session.resolve``."""
    parser.add_argument(
        "node",
        metavar="NODE",
        help="node ID, or a prefix of it that names one node; n1, n2, ... of a local cluster",
    )


def add(
    commands: Any,
    name: str,
    run: Run,
    *,
    help: str | None = None,
    description: str,
    interruptible: bool = False,
    without_leader: bool = False,
) -> argparse.ArgumentParser:
    """Register the sub-command ``name`` running ``run``; returns its parser for the
    command's own arguments.

    :param interruptible: Ctrl-C is how the command ends (``logs -f``): exit 0, not 130.
    :param without_leader: the command talks to one node only, and still runs when the
        consensus has no quorum, on the members that answer (a line on stderr says so):
        where an operator looks for why there is no leader.
    """
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help, description=description)
    add_connection_options(parser, suppress=True)
    parser.set_defaults(handler=_handler(run, interruptible, without_leader))
    return parser


def _handler(
    run: Run, interruptible: bool, without_leader: bool
) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        try:
            _run(run, args, without_leader=without_leader)
        except KeyboardInterrupt:
            return 0 if interruptible else EXIT_INTERRUPTED
        except CtlError as exc:
            report(PROG, exc)
            return exc.exit_code
        return 0

    return handler


def _note(line: str) -> None:
    """Tell the person waiting, on stderr, why the command takes longer."""
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _run(run: Run, args: argparse.Namespace, *, without_leader: bool = False) -> None:
    """Load the access directory and run the command in a session (``without_leader``:
    see ``add``).

    :raises CtlError: for every failure this command reports.
    """
    directory = _local.owner_of(resolve_access_directory(args.credentials))
    try:
        access = _load_access(directory, args.endpoint)
    except CredentialsError as exc:
        raise CtlError(f"{exc}{_local_hint(args.credentials)}", EXIT_USAGE) from None
    # Imported here, not at the top: ``ctl --help`` lists every sub-command without
    # loading grpc, protobuf or cryptography, which only a call to the cluster needs.
    import anyio
    import grpc

    from roleserve_core.cli.ctl._session import open_session, remember_curators
    from roleserve_core.connection import ForeignClusterError, NoQuorumError

    async def in_session() -> None:
        async with open_session(
            access,
            args.timeout,
            without_leader=without_leader,
            say=_note,
            local_access=directory,
            remembered_in=None if args.endpoint else directory,
        ) as session:
            if session.quorum is not None:
                said = NoQuorumError(session.quorum, _start_them(directory))
                print(f"{PROG}: {said}; reaching the members that answer", file=sys.stderr)
            elif not args.endpoint:
                await remember_curators(session, directory)
            await run(session, args)

    try:
        with sole_error():
            anyio.run(in_session)
    except CtlError:  # already said as this command says it, with its own exit code
        raise
    except grpc.aio.AioRpcError as exc:  # a call made outside Session.call/stream
        raise rpc_failure("the cluster refused", exc) from None
    except NoQuorumError as exc:
        raise CtlError(
            str(NoQuorumError(exc.quorum, _start_them(directory))), EXIT_REFUSED
        ) from None
    except ForeignClusterError as exc:
        raise CtlError(
            f"the curator at {', '.join(exc.endpoints)} is not of the cluster in {directory} "
            "(its CA differs); use the credentials of the cluster at that address "
            "(--credentials DIR), or the addresses of this one (--endpoint)",
            EXIT_REFUSED,
        ) from None
    except RoleserveError as exc:  # NoLeaderError, a corrupt CA from the cluster, ...
        raise CtlError(str(exc), EXIT_REFUSED) from None


def _start_them(directory: Path) -> str:
    """How to start the consensus members that do not answer: ``cluster up`` when the
    access directory is a local cluster's (``D/owner``, beside ``D/first-address``)."""
    from roleserve_core.cli._invocation import roleserve_command
    from roleserve_core.connection.leader import START_THEM

    cluster = _local.cluster_of(directory)
    if cluster is not None:
        return f"start them: {roleserve_command()} cluster up --dir {cluster}"
    return START_THEM


def _local_hint(flag: str | None) -> str:
    """Where a local cluster's owner credentials are, when none were given (neither
    ``--credentials`` nor ``$ROLESERVE_CREDENTIALS``) and ``cluster up``'s default
    directory holds a cluster; else nothing."""
    if flag or os.environ.get(CREDENTIALS_ENV):
        return ""
    return _local.local_credentials_hint(default_cluster_directory())


def _load_access(directory: Path, endpoints: Sequence[str]) -> ClusterAccess:
    """The access directory's credentials, with ``endpoints`` (``--endpoint``) in place of
    its endpoints file when given, so a directory without one still works with the flag.

    :raises CredentialsError: naming the directory or file, and how to point at another.
    """
    if endpoints and directory.is_dir():
        return ClusterAccess.of(checked_credentials(directory), endpoints)
    # Without --endpoint, or without the directory: load's message names what is missing
    # and how to point at another directory (--credentials, $ROLESERVE_CREDENTIALS).
    return ClusterAccess.load(directory)
