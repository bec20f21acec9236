"""Choosing the enrolment path from the data directory and the command line.

::

    node/credentials exists ─────────────▶ join      (flags refused: already enrolled)
    node/bootstrapping exists ───────────▶ bootstrap (resumed; --register refused)
    node/registration.pb exists ─────────▶ register  (resumed; a new --register replaces it)
    --bootstrap ─────────────────────────▶ bootstrap (marker written first)
    --register TICKET --join-address A ──▶ register  (registration.pb written first)
    nothing ─────────────────────────────▶ error: say which flags start a node

"--register TICKET" stands for any source of the ticket: ``--register-file PATH`` and
``$ROLESERVE_REGISTER_TICKET`` keep it out of ``ps``; the command line reads it
(``cli/node.py``) and names the source in ``ticket_source`` for the messages.

The plan is made before the node starts anything, so every mistake (both flags, a damaged
ticket, an owner directory that holds another cluster's credentials) is a clear error at
once, and nothing on disk is lost. What the plan writes (the bootstrap marker, the pending
registration) is what lets a later start without flags resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from roleserve_core.access import default_access_directory
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment.ticket import InvalidTicketError, RegisterTicket
from roleserve_core.environment import REGISTER_TICKET_ENV
from roleserve_core.errors import ConfigError, EnrolmentError
from roleserve_core.identity import CERTIFICATE_FILE
from roleserve_core.ports import CURATOR_PORT, endpoint, split_endpoint
from roleserve_core.proto import node_pb2

__all__ = [
    "BootstrapPlan",
    "EnrolmentPlan",
    "EnrolmentRequest",
    "JoinPlan",
    "RegisterPlan",
    "plan_enrolment",
]


@dataclass(frozen=True)
class EnrolmentRequest:
    """What the command line asked for."""

    bootstrap: bool = False
    owner_credentials: Path | None = None
    """Where the bootstrap writes the owner's access directory; None for the default."""
    ticket: str | None = None
    ticket_source: str = "--register"
    """Where the ticket came from (``--register-file PATH``, ``$ROLESERVE_REGISTER_TICKET``),
    for the messages: the operator must find what to change."""
    join_addresses: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class JoinPlan:
    """The node is enrolled: it starts with its saved credentials."""


@dataclass(frozen=True)
class BootstrapPlan:
    """The node bootstraps a new cluster."""

    owner_directory: Path


@dataclass(frozen=True)
class RegisterPlan:
    """The node registers with a cluster and waits for approval."""

    pending: node_pb2.PendingRegistration


EnrolmentPlan = JoinPlan | BootstrapPlan | RegisterPlan


def plan_enrolment(
    datadir: NodeDataDirectory, request: EnrolmentRequest, *, can_bootstrap: bool
) -> EnrolmentPlan:
    """The path this start takes; see the module docstring.

    :param can_bootstrap: whether a plugin that bootstraps clusters (controlplane) is loaded.
    :raises ConfigError: for contradictory or malformed options.
    :raises EnrolmentError: when the options do not fit the data directory.
    """
    _check_options(request)
    asked = (
        "--bootstrap" if request.bootstrap else request.ticket_source if request.ticket else None
    )
    if datadir.enrolled:
        if asked:
            raise EnrolmentError(
                f"{datadir.root} already belongs to a cluster; start the node without "
                f"{asked}: it rejoins with its saved credentials"
            )
        return JoinPlan()
    if datadir.bootstrapping.exists():
        if request.ticket:
            raise EnrolmentError(
                f"{datadir.root} is bootstrapping a new cluster; start it without "
                f"{request.ticket_source} to finish, or use another data directory"
            )
        _check_can_bootstrap(can_bootstrap)
        return BootstrapPlan(Path(datadir.bootstrapping.read_text().strip()))
    if request.bootstrap:
        if datadir.registration.exists():
            raise EnrolmentError(
                f"{datadir.root} is registering with a cluster; it cannot bootstrap one"
            )
        return _new_bootstrap(datadir, request, can_bootstrap)
    if request.ticket:
        return _new_registration(datadir, request)
    pending = node_pb2.PendingRegistration()
    if datadir.read_message(datadir.registration, pending):
        return RegisterPlan(pending)
    raise EnrolmentError(
        f"{datadir.root} holds no cluster membership; start with --bootstrap to create a "
        f"cluster, or with a ticket (--register-file PATH, ${REGISTER_TICKET_ENV} or "
        "--register TICKET) and --join-address HOST to join one"
    )


def _check_options(request: EnrolmentRequest) -> None:
    source = request.ticket_source
    if request.bootstrap and request.ticket:
        raise ConfigError(f"give either --bootstrap or {source}, not both")
    if request.ticket and not request.join_addresses:
        raise ConfigError(f"{source} needs at least one --join-address HOST[:PORT]")
    if request.join_addresses and not request.ticket:
        raise ConfigError(
            f"--join-address is for --register (or --register-file, ${REGISTER_TICKET_ENV})"
        )
    if request.owner_credentials and not request.bootstrap:
        raise ConfigError("--owner-credentials is for --bootstrap")


def _check_can_bootstrap(can_bootstrap: bool) -> None:
    if not can_bootstrap:
        raise EnrolmentError(
            "bootstrapping a cluster needs the controlplane plugin "
            "(pip install roleserve-controlplane), and it is not loaded"
        )


def _new_bootstrap(
    datadir: NodeDataDirectory, request: EnrolmentRequest, can_bootstrap: bool
) -> BootstrapPlan:
    _check_can_bootstrap(can_bootstrap)
    owner = (request.owner_credentials or default_access_directory()).expanduser().absolute()
    if (owner / CERTIFICATE_FILE).exists():
        raise EnrolmentError(
            f"{owner} already holds cluster credentials; move them away, or pass "
            "--owner-credentials DIR to write this cluster's owner credentials elsewhere"
        )
    datadir.create()
    datadir.bootstrapping.write_text(f"{owner}\n")
    return BootstrapPlan(owner)


def _new_registration(datadir: NodeDataDirectory, request: EnrolmentRequest) -> RegisterPlan:
    assert request.ticket is not None
    try:
        ticket = RegisterTicket.decode(request.ticket)
    except InvalidTicketError as exc:
        raise ConfigError(f"{request.ticket_source}: {exc}") from None
    try:
        addresses = [
            endpoint(*split_endpoint(text, CURATOR_PORT)) for text in request.join_addresses
        ]
    except ValueError as exc:
        raise ConfigError(f"--join-address: {exc}") from None
    pending = node_pb2.PendingRegistration(ticket=ticket.to_proto(), join_addresses=addresses)
    datadir.create()
    datadir.write_message(datadir.registration, pending)
    return RegisterPlan(pending)
