"""Register: a new node joins a cluster with a ticket, once an operator approves it.

::

    node key, join key (made once, saved)
    ephemeral certificate for the node key + the ticket's CA
    find the leader through the join addresses
    RegisterNode(ticket, join key)            ─ refused ticket: the node stops, saying so
        └▶ registration.pb: registered
    CommitNode every second until approved    ─ note and log: "roleserve ctl approve <id>"
        └▶ node certificate
    credentials saved (the join addresses become the seeds) ─▶ node_credentials, node_id

A restart at any point resumes from registration.pb without the flags. The ephemeral
certificate proves only that the caller holds the node key, which is all the curator needs
to tie the registration, the approval and the certificate to one node ID.
"""

from __future__ import annotations

from typing import Any

import anyio
import grpc

from roleserve_core.connection.curators import KnownCurators
from roleserve_core.connection.leader import find_leader
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment._enrolled import announce, save_credentials
from roleserve_core.enrolment.ticket import RegisterTicket
from roleserve_core.errors import EnrolmentError
from roleserve_core.identity import (
    EphemeralCredentials,
    NodeCredentials,
    certificate_from_pem,
    node_id,
    public_key_der,
)
from roleserve_core.proto import curator_pb2, curator_pb2_grpc, node_pb2
from roleserve_core.registry import PluginValues
from roleserve_core.rpc import secure_channel
from roleserve_core.supervisor import RunContext

__all__ = ["COMMIT_EVERY", "register"]

COMMIT_EVERY = 1.0
"""Seconds between CommitNode attempts while the node waits for approval (Monogon's)."""

FIND_LEADER_PATIENCE = 60.0
"""Seconds to look for the leader before failing (and retrying after the backoff)."""


async def register(
    ctx: RunContext,
    datadir: NodeDataDirectory,
    values: PluginValues,
    known: KnownCurators,
    pending: node_pb2.PendingRegistration,
) -> None:
    """Register, wait for approval, commit; see the module docstring.

    :raises EnrolmentError: when the cluster refuses the node for good.
    """
    key = datadir.load_or_create_key(datadir.key)
    join_key = datadir.load_or_create_key(datadir.join_key)
    ticket = RegisterTicket.from_proto(pending.ticket)
    ephemeral = EphemeralCredentials.for_key(key, ticket.ca_certificate)
    identity = node_id(key.public_key())
    addresses = list(pending.join_addresses)
    ctx.set_note(f"looking for the cluster's leader at {', '.join(addresses)}")
    leader = await find_leader(addresses, ephemeral, timeout=FIND_LEADER_PATIENCE)
    async with secure_channel(leader.endpoint, ephemeral, node_id=leader.node_id) as channel:
        curator = curator_pb2_grpc.CuratorStub(channel)
        if not pending.registered:
            await _register(curator, ticket, public_key_der(join_key.public_key()))
            pending.registered = True
            datadir.write_message(datadir.registration, pending)
        waiting = f"waiting for approval: roleserve ctl approve {identity}"
        ctx.set_note(waiting)
        ctx.log.info("registered as %s; %s", identity, waiting)
        committed = await _commit(curator, identity)
    credentials = NodeCredentials(
        key,
        certificate_from_pem(committed.node_certificate, "the node certificate"),
        certificate_from_pem(committed.ca_certificate, "the cluster CA"),
    )
    save_credentials(datadir, credentials, known, addresses)
    datadir.registration.unlink(missing_ok=True)
    ctx.log.info("approved: this node is %s", credentials.node_id)
    announce(values, credentials)


_REFUSED = (
    grpc.StatusCode.PERMISSION_DENIED,  # a wrong or replaced ticket
    grpc.StatusCode.ALREADY_EXISTS,  # the join key is registered already
    grpc.StatusCode.INVALID_ARGUMENT,  # a request the curator will never accept
)
"""RegisterNode's answers that waiting cannot change: the node stops instead of retrying."""


async def _register(curator: Any, ticket: RegisterTicket, join_key: bytes) -> None:
    request = curator_pb2.RegisterNodeRequest(register_ticket=ticket.ticket, join_key=join_key)
    try:
        await curator.RegisterNode(request)
    except grpc.aio.AioRpcError as exc:
        code = exc.code()
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            return  # registered before (an answer lost to a crash), and past NEW already
        if code in _REFUSED:
            raise EnrolmentError(
                f"the cluster refused the registration: {exc.details()}. Get a new ticket "
                "with `roleserve ctl ticket` and start the node again with --register"
            ) from None
        raise


async def _commit(curator: Any, identity: str) -> curator_pb2.CommitNodeResponse:
    while True:
        try:
            response: curator_pb2.CommitNodeResponse = await curator.CommitNode(
                curator_pb2.CommitNodeRequest()
            )
            return response
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise EnrolmentError(f"the cluster refused {identity}: {exc.details()}") from None
            if exc.code() != grpc.StatusCode.PERMISSION_DENIED:
                raise
        await anyio.sleep(COMMIT_EVERY)
