"""Worker ``renewal``: renew the node's certificate before it expires, without a restart.

Reads ``node_credentials`` and ``curator_connection``; writes ``node_credentials`` (the
core owns it) and the credentials in the node's data directory.

::

    node_credentials ─▶ due = not_before + 2/3 of the lifetime (wall-clock time)
        sleep on the node's clock until its wall() reaches due (RECHECK at most at a time)
        ─▶ RenewCertificate on the current curator_connection
             ok      ─▶ save cert.pem (atomic renames) ─▶ set node_credentials ─▶ due anew
             failed  ─▶ one warning line, a note; retry after RETRY_FIRST s, doubling up to
                        RETRY_MAX s, on the current connection then
        never two renewals within RETRY_FIRST s (a certificate already due when it comes)

The key stays the node's own: the node ID is derived from it, and the curator proves the
key by the TLS handshake of the call, so the node sends no CSR and the curator signs the
key stored in the node's record. The certificate's lifetime is the cluster's (the
curator's configuration, 30 days by default); the node learns it from the certificate.

Who picks the new certificate up: the connector makes a new channel to the leader when
``node_credentials`` changes, and the node management server restarts with it (its
``restart_needed``); the controlplane plugin's curator server reads the latest
``node_credentials`` at each TLS handshake (``rpc.bind(..., current=...)``). Connections
open at the change keep their handshake, which an expiry does not end.

Why sleep in steps of at most RECHECK: a monotonic sleep does not count the time a machine
is suspended, and an operator may set the wall clock; waking at least hourly puts the
renewal at most that late. Waiting on the node's clock lets the test kit's FakeClock move
the certificate's time. A decommissioned node cannot renew: the leader's gate refuses it
(``rpc.node_refusal``), which this worker reports like every other, and the node stops.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import grpc

from roleserve_core.clock import Clock
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.errors import CredentialsError, IdentityError
from roleserve_core.event import Value
from roleserve_core.identity import NodeCredentials, certificate_from_pem
from roleserve_core.node import NodeContext, Worker
from roleserve_core.proto import curator_pb2, curator_pb2_grpc
from roleserve_core.rpc import node_refusal
from roleserve_core.supervisor import BackoffPolicy, Retry, RunContext
from roleserve_core.values import CURATOR_CONNECTION, NODE_CREDENTIALS, CuratorConnection

__all__ = [
    "CALL_TIMEOUT",
    "RECHECK",
    "RENEW_AFTER",
    "RETRIES",
    "RETRY_FIRST",
    "RETRY_MAX",
    "Renewal",
    "renewal_due",
    "renewal_worker",
]

RENEW_AFTER = 2 / 3
"""The part of its lifetime after which a certificate is renewed: a third of it (ten days
by default) is left for a curator that does not answer."""
RETRY_FIRST = 10.0
"""Seconds before the first retry of a failed renewal; doubled after each failure."""
RETRY_MAX = 600.0
"""Seconds between retries at most."""
RETRIES = BackoffPolicy(initial=RETRY_FIRST, multiplier=2.0, maximum=RETRY_MAX, jitter=0.0)
"""The pauses between attempts of a failed renewal: RETRY_FIRST, doubling up to RETRY_MAX."""
RECHECK = 3600.0
"""Seconds of the longest sleep before the wall-clock time is read again (see above)."""
CALL_TIMEOUT = 30.0
"""Seconds the RenewCertificate call may take."""


def renewal_worker(node: NodeContext) -> Worker:
    """The worker, for the core's ``roleserve_workers``."""
    return Worker("renewal", Renewal(node).run, reads=(NODE_CREDENTIALS, CURATOR_CONNECTION))


def renewal_due(credentials: NodeCredentials) -> float:
    """When ``credentials`` are due for renewal, in seconds since the epoch."""
    start = credentials.certificate.not_valid_before_utc
    end = credentials.certificate.not_valid_after_utc
    return (start + (end - start) * RENEW_AFTER).timestamp()


class Renewal:
    """The worker, and when it tries next (for tests and status)."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        self.next_attempt: Value[float] = Value()
        """The node clock's ``now()`` at which the worker wakes next (set before it sleeps)."""

    @property
    def credentials_directory(self) -> Path:
        """Where the node keeps its credentials: the core's plugin directory is
        ``<data dir>/plugins/core``."""
        return NodeDataDirectory(self.node.data_dir.parent.parent).credentials

    async def run(self, ctx: RunContext) -> None:
        """Renews the node certificate after two thirds of its lifetime."""
        clock = ctx.clock
        with self.node.values.watch(NODE_CREDENTIALS) as watcher:
            credentials = await watcher.get()
        ctx.signal_healthy()
        earliest = clock.wall()
        while True:
            # Never again within RETRY_FIRST: a certificate already due when it comes (a
            # clock far behind the curator's) would be renewed again and again at once.
            due = max(renewal_due(credentials), earliest)
            ctx.set_note(f"renews at {_utc(due)}")
            while clock.wall() < due:
                await self._sleep(clock, min(due - clock.wall(), RECHECK))
            credentials = await self._renewed(ctx, clock, credentials)
            credentials.save(self.credentials_directory)
            self.node.values.set(NODE_CREDENTIALS, credentials)
            earliest = clock.wall() + RETRY_FIRST
            ctx.log.info(
                "renewed the node certificate; valid until %s",
                _utc(credentials.certificate.not_valid_after_utc.timestamp()),
            )

    async def _sleep(self, clock: Clock, seconds: float) -> None:
        self.next_attempt.set(clock.now() + seconds)
        await clock.sleep(seconds)

    async def _renewed(
        self, ctx: RunContext, clock: Clock, credentials: NodeCredentials
    ) -> NodeCredentials:
        """New credentials from the curator, retried with backoff until it gives them."""
        pauses = Retry(RETRIES, clock=clock)
        while True:
            with self.node.values.watch(CURATOR_CONNECTION) as connections:
                connection = await connections.get()
            try:
                return await _renew(connection, credentials)
            except grpc.aio.AioRpcError as exc:
                reason = node_refusal(exc)
                if reason is not None:
                    connection.report_refused(reason)
                said = f"{exc.code().name}: {exc.details()}"
            except CredentialsError as exc:
                said = str(exc)
            message = f"cannot renew the node certificate ({said}); again in {pauses.delay:g} s"
            ctx.log.warning("%s", message)
            ctx.set_note(message)
            await self._sleep(clock, pauses.next_delay())


async def _renew(connection: CuratorConnection, credentials: NodeCredentials) -> NodeCredentials:
    """The node's credentials with the certificate the curator renews.

    :raises grpc.aio.AioRpcError: if the call fails.
    :raises CredentialsError: if the answer is not a certificate for the node's key.
    """
    stub = curator_pb2_grpc.CuratorStub(connection.channel)
    response = await stub.RenewCertificate(
        curator_pb2.RenewCertificateRequest(), timeout=CALL_TIMEOUT
    )
    try:
        certificate = certificate_from_pem(response.node_certificate, "the renewed certificate")
    except IdentityError as exc:
        raise CredentialsError(str(exc)) from None
    return NodeCredentials(credentials.key, certificate, credentials.ca_certificate)


def _utc(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
