"""The options every ``roleserve ctl`` sub-command takes, apart from what runs it
(``_command``): ``ctl --help`` shows them without importing what a call to the cluster
needs.

The connection options (``--credentials``, ``--endpoint``, ``--timeout``) are accepted
before the sub-command (``ctl --timeout 5 nodes``) and after it (``ctl nodes --timeout
5``). After it, their defaults are suppressed, so an option given only before the
sub-command is not overwritten by the sub-command's default.
"""

from __future__ import annotations

import argparse

from roleserve_core.environment import CREDENTIALS_ENV

# typing only for the annotations: the ``roleserve`` command imports this module at start,
# and importing ``typing`` costs it a tenth of the interpreter's start (benchmarks/cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DEFAULT_TIMEOUT", "PROG", "add_connection_options"]

PROG = "roleserve ctl"
DEFAULT_TIMEOUT = 10.0
"""Seconds to find the leader, and for each call: long enough for an election to end."""


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def add_connection_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``--credentials``, ``--endpoint`` and ``--timeout``; with ``suppress``, without
    defaults (for the copy after the sub-command: see the module docstring)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("connection")
    group.add_argument(
        "--credentials",
        metavar="DIR",
        default=default(None),
        help=(
            f"access directory (ca.pem, cert.pem, key.pem, endpoints), or a local cluster's "
            f"directory (its owner/); default: ${CREDENTIALS_ENV}, else ~/.config/roleserve/owner"
        ),
    )
    group.add_argument(
        "--endpoint",
        metavar="HOST[:PORT]",
        action="append",
        default=default([]),
        help="a curator to ask for the leader (repeatable; default port 7835); replaces "
        "the access directory's endpoints",
    )
    group.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_positive_seconds,
        default=default(DEFAULT_TIMEOUT),
        help=f"to find the leader, and for each call (default {DEFAULT_TIMEOUT:g})",
    )
