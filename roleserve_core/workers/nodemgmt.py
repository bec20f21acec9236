"""The worker ``nodemgmt``: serves ``NodeManagement`` on the node's own address, port 7839.

::

    node_credentials ──┐                                     (will be read)
                       ├──▶ plan_listen() ──▶ Listen(address, credentials)
    network ───────────┘      │            │
                              │            └──▶ gRPC server on <address>:7839, mutual TLS
                              │                 with the node certificate, serving
                              │                 NodeManagementService(introspection)
                              └──▶ a note: what it still waits for

What it does: waits, in state NEW with a note saying for what, until the node has its
credentials (``node_credentials``) and knows its address (``network``,
``NetworkStatus.external_address``); then serves the node management service (see
``roleserve_core.service_nodemanagement``) over the node's TLS, on the node's own address and never
on a wildcard, so several nodes on one machine each serve on their loopback address. It
signals healthy once the server has started. Cancelled, it ends the following ``GetLogs``
calls first (``end_follows``: OK, so a reader of ``ctl logs -f`` tells a node that stops
from one that failed), then stops the server, giving the calls still running
``STOP_GRACE`` to end before they are cancelled.

Reads ``node_credentials`` and ``network``, and ``revoked_credentials`` on each call (the
``revocations`` worker keeps it; not waited for: until it is set, no certificate is
refused as revoked); writes no value. It needs the node's
introspection (``NodeContext.introspection``), which only a ``NodeRuntime`` provides.

When it restarts:

- when the address or the certificate it serves with changes (``ctx.restart``: at once,
  no backoff); any other set of its inputs changes nothing (``restart_needed``);
- when the server cannot listen (the address is not on this machine yet, or another process
  holds the port): it dies, and the supervisor retries it with backoff. Port reuse is off,
  so a second process on the same address fails loudly instead of sharing the port.
- ``RestartRunnable`` of itself or of an ancestor restarts it once the answer is sent.

Monogon's ``worker_nodemgmt`` (``roleserve/worker_nodemgmt.go``) waits for the curator
connection and listens on ``:7839``. This one waits only for what the server needs, its
certificate and address, so that an owner can read the logs of a node that cannot reach the
control plane, which is when they are needed most.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import grpc

from roleserve_core._moved import moved_names
from roleserve_core.errors import RoleserveError
from roleserve_core.event import Combined, ValueWatch
from roleserve_core.identity import NodeCredentials
from roleserve_core.node import NodeContext, NodeIntrospection, Worker
from roleserve_core.ports import NODE_MANAGEMENT_PORT, endpoint
from roleserve_core.proto import nodemanagement_pb2_grpc
from roleserve_core.rpc import Revocations, bind, create_server
from roleserve_core.service_nodemanagement import NodeManagementService
from roleserve_core.stats import RpcStats
from roleserve_core.supervisor import RunContext
from roleserve_core.values import (
    NETWORK,
    NODE_CREDENTIALS,
    REVOKED_CREDENTIALS,
    IPAddress,
    NetworkStatus,
    RevokedCredentials,
)

__all__ = ["SERVER_OPTIONS", "Listen", "nodemgmt_worker", "plan_listen", "restart_needed"]

STOP_GRACE = 1.0
"""Seconds the calls running when the server stops have to end: the ended follows their
last message and status, the others (a tree, a page of logs) their answer."""

SERVER_OPTIONS = (("grpc.so_reuseport", 0),)
"""No port sharing: grpc turns SO_REUSEPORT on by default, which would let two processes
on one address split the connections between them without a word."""


@dataclass(frozen=True, eq=False, slots=True)
class Listen:
    """Where and as whom to serve: the startup value of one run of the worker.

    No ``==``: whether two of them differ in a way that matters is ``restart_needed``'s
    question, not equality of keys.
    """

    address: IPAddress
    """The node's own address; never a wildcard."""
    credentials: NodeCredentials
    """The node's key and certificate the server presents, and the CA it verifies with."""

    @property
    def endpoint(self) -> str:
        """``host:port`` to listen on."""
        return endpoint(self.address, NODE_MANAGEMENT_PORT)

    def __repr__(self) -> str:
        return f"Listen({self.endpoint} as {self.credentials.node_id})"


def plan_listen(credentials: NodeCredentials | None, network: NetworkStatus | None) -> Listen | str:
    """What to do with these inputs: serve (a ``Listen``) or wait (a note saying for what).

    ``None`` stands for a value not set yet.
    """
    address = network.external_address if network is not None else None
    if credentials is None and address is None:
        return "waiting for node credentials and address"
    if credentials is None:
        return "waiting for node credentials"
    if address is None:
        return "waiting for the node's address"
    return Listen(address, credentials)


def restart_needed(serving: Listen, latest: Listen | str) -> bool:
    """Whether a run serving ``serving`` must restart for the inputs planned as ``latest``.

    Only what the server is made of matters: its address, its certificate (which fixes its
    key) and the cluster CA it verifies clients with. A set of equal values, or of a network
    status that keeps the address, changes nothing.
    """
    if isinstance(latest, str):
        return True
    return (
        latest.address != serving.address
        or latest.credentials.certificate != serving.credentials.certificate
        or latest.credentials.ca_certificate != serving.credentials.ca_certificate
    )


def nodemgmt_worker(node: NodeContext) -> Worker:
    """The worker of the built-in plugin ``nodemgmt``; always runs."""

    async def run(ctx: RunContext) -> None:
        """Serves node management (tree, values, logs, restarts) on port 7839."""
        introspection = _introspection(node)
        sources = (node.values.read(NODE_CREDENTIALS), node.values.read(NETWORK))
        async with Combined(*sources) as inputs:
            while True:
                listen = plan_listen(*await inputs.get())
                if isinstance(listen, Listen):
                    break
                ctx.set_note(listen)
            service = NodeManagementService(introspection, log=ctx.log, serving_dn=ctx.dn)
            revoked = _RevokedFromValue(node.values.read(REVOKED_CREDENTIALS))
            async with _serving(service, listen, revoked, introspection.stats.rpc):
                ctx.set_note(f"serving at {listen.endpoint}")
                ctx.log.info("serving node management at %s", listen.endpoint)
                ctx.signal_healthy()
                latest = plan_listen(*await inputs.get())
                while not restart_needed(listen, latest):
                    latest = plan_listen(*await inputs.get())
                ctx.log.info("its address or certificate changed, restarting: %s", latest)
                ctx.restart()
                await anyio.sleep_forever()  # until the restart's cancellation arrives

    return Worker("nodemgmt", run, reads=(NODE_CREDENTIALS, NETWORK, REVOKED_CREDENTIALS))


class _RevokedFromValue:
    """``rpc.Revocations`` from the ``revoked_credentials`` value, read on each call: none
    until the ``revocations`` worker has heard from the leader."""

    def __init__(self, view: ValueWatch[RevokedCredentials]) -> None:
        self.view = view

    def revoked(self, serial: int) -> bool:
        """Whether the leader last said ``serial`` is revoked."""
        return self.view.statistics().is_set and serial in self.view.get_nowait().serials

    async def wait_revoked(self, serial: int) -> None:
        """Return once the leader says ``serial`` is revoked (ends that user's streams)."""
        with self.view.watch() as revoked:
            await revoked.get(filter=lambda value: serial in value.serials)


def _introspection(node: NodeContext) -> NodeIntrospection:
    """The node's introspection, or a clear error.

    Checked when the worker runs rather than when it is built, so that listing the core's
    workers never fails; only a ``NodeRuntime`` runs workers, and it always provides it.
    """
    if node.introspection is None:
        raise RoleserveError(
            "nodemgmt needs the node's introspection (NodeContext.introspection), which "
            "only a NodeRuntime provides"
        )
    return node.introspection


@contextlib.asynccontextmanager
async def _serving(
    service: NodeManagementService, listen: Listen, revocations: Revocations, stats: RpcStats
) -> AsyncIterator[None]:
    """A started server of ``service`` at ``listen``, refusing the user certificates
    ``revocations`` names; on exit, its follows ended and it stopped (``STOP_GRACE``).

    :raises OSError: naming the address, if it cannot listen there.
    """
    server: grpc.aio.Server = create_server(
        listen.credentials, options=SERVER_OPTIONS, revocations=revocations, stats=stats
    )
    nodemanagement_pb2_grpc.add_NodeManagementServicer_to_server(service, server)
    try:
        bind(server, listen.endpoint, listen.credentials)
        await server.start()
        yield
    finally:
        with anyio.CancelScope(shield=True):
            service.end_follows()
            await server.stop(STOP_GRACE)


if TYPE_CHECKING:
    plan = plan_listen
else:
    # Plugin API 1's name of plan_listen, renamed to read on its own at the top level.
    __getattr__ = moved_names(__name__, {"plan": "roleserve_core:plan_listen"}, api=1)
