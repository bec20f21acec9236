"""``ctl ticket``: the string a new node registers with, and the command it runs.

The ticket string carries the cluster's register ticket and the cluster CA (see
``roleserve_core.enrolment.ticket``). The CA is the one the leader serves in
``GetClusterInfo``, not the one in the operator's access directory: a node must trust the
CA the cluster uses, and the two are the same unless the access directory is stale, in
which case the leader's is right.

Stdout gets the ticket alone, so ``roleserve ctl ticket > FILE`` works; the command a new
node runs goes to stderr, for the person reading. That command reads the ticket from the
file (``--register-file``): the ticket is a secret, and a command line is shown to every
local user by ``ps``. It names the node's ``--address``, which the node keeps for good (its
etcd peer URL and its certificate's use depend on it), and the command as this one was run
(``_invocation``). Its join address is the leader's: the one address known to answer now.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._invocation import roleserve_command
from roleserve_core.cli.ctl import _command
from roleserve_core.environment import REGISTER_TICKET_ENV
from roleserve_core.ports import CURATOR_PORT, split_endpoint

if TYPE_CHECKING:
    from roleserve_core.cli.ctl._session import Session

__all__ = ["add_parsers", "join_address", "register_command", "show_ticket"]


def add_parsers(commands: Any) -> None:
    """Register ``ticket``."""
    _command.add(
        commands,
        "ticket",
        show_ticket,
        description=(
            "Print the register ticket (rs1-...) on stdout, and on stderr the command a "
            "new node runs with it (the ticket saved to a file, out of `ps`). The node then "
            "waits for `ctl approve`."
        ),
    )


def join_address(leader_endpoint: str) -> str:
    """The leader's host, with its port only if it is not the standard curator port."""
    host, port = split_endpoint(leader_endpoint, CURATOR_PORT)
    return leader_endpoint if port != CURATOR_PORT else host


async def show_ticket(session: Session, args: argparse.Namespace) -> None:
    """``ctl ticket``."""
    from roleserve_core.enrolment.ticket import RegisterTicket
    from roleserve_core.identity import certificate_from_pem
    from roleserve_core.proto import management_pb2

    management = session.management
    info = await session.call(
        "reading the cluster CA", management.GetClusterInfo, management_pb2.GetClusterInfoRequest()
    )
    answer = await session.call(
        "getting the register ticket",
        management.GetRegisterTicket,
        management_pb2.GetRegisterTicketRequest(),
    )
    ca = certificate_from_pem(info.ca_certificate, "the cluster CA the leader sent")
    ticket = RegisterTicket(answer.ticket, ca).encode()
    print(ticket, flush=True)
    print(register_command(join_address(session.leader.endpoint)), file=sys.stderr)


def register_command(join: str) -> str:
    """What a new node runs to register through ``join`` (see the module docstring)."""
    roleserve = roleserve_command()
    return (
        f"A new node registers with the ticket saved in a file "
        f"(`{roleserve} ctl ticket > TICKET_FILE`):\n"
        f"  {roleserve} node run --data-dir DATA_DIR --address NODE_ADDRESS "
        f"--register-file TICKET_FILE --join-address {join}\n"
        f"(or with the ticket in ${REGISTER_TICKET_ENV} instead of --register-file)"
    )
