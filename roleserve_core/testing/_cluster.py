"""A throwaway cluster for one test: its CA, the node under test's credentials, and fake
curators that serve until the test ends.

::

    ThrowawayCA ─┬─ node(key) ──────▶ NodeCredentials (the node under test, each FakeCurator)
                 ├─ user(identity) ──▶ UserCredentials ("owner" by default)
                 └─ ticket(secret) ──▶ register ticket "rs1-...", carrying the CA
    FakeCluster.curator() ──▶ FakeCurator, serving until the cluster's exit stack closes
    FakeCluster.connect(curator) ──▶ CuratorConnection, as the connector makes it

A test's fixture opens the exit stack; request that fixture before the node's, so the
curators stop after the node did.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509

from roleserve_core.enrolment.ticket import RegisterTicket
from roleserve_core.identity import (
    NodeCredentials,
    PrivateKey,
    UserCredentials,
    create_ca,
    generate_key,
    issue_node_certificate,
    issue_user_certificate,
)
from roleserve_core.rpc import secure_channel
from roleserve_core.testing._curator import FakeCurator
from roleserve_core.values import CuratorConnection

__all__ = ["FakeCluster", "ThrowawayCA"]


class ThrowawayCA:
    """A cluster CA made for one test: a new key and self-signed certificate each time,
    issuing node and user credentials and register tickets of its cluster.

    Two instances are two clusters, neither trusting the other's credentials.
    """

    def __init__(self) -> None:
        self.key: PrivateKey = generate_key()
        self.certificate: x509.Certificate = create_ca(self.key)

    def node(self, key: PrivateKey | None = None) -> NodeCredentials:
        """Credentials of a node of this cluster, for ``key`` (a new key when ``None``)."""
        if key is None:
            key = generate_key()
        cert = issue_node_certificate(self.key, self.certificate, key.public_key())
        return NodeCredentials(key, cert, self.certificate)

    def user(self, identity: str = "owner") -> UserCredentials:
        """Credentials of a user of this cluster with a new key, ``owner`` by default."""
        key = generate_key()
        cert = issue_user_certificate(self.key, self.certificate, key.public_key(), identity)
        return UserCredentials(key, cert, self.certificate)

    def ticket(self, secret: bytes = b"secret") -> str:
        """A register ticket (``rs1-...``) of this cluster: ``secret`` and this CA."""
        return RegisterTicket(secret, self.certificate).encode()


@dataclass
class FakeCluster:
    """The cluster of one test: its CA, the node under test, and fake curators."""

    ca: ThrowawayCA
    credentials: NodeCredentials
    """The node under test's."""
    stack: contextlib.AsyncExitStack = field(repr=False)
    """Closed when the test ends: stops the curators, closes the connections."""

    async def curator(self, **options: Any) -> FakeCurator:
        """A fake curator (``FakeCurator`` options), serving until the test ends; it
        renews certificates with this cluster's CA."""
        options.setdefault("ca_key", self.ca.key)
        return await self.stack.enter_async_context(FakeCurator(self.ca.node(), **options))

    def connect(self, curator: FakeCurator) -> CuratorConnection:
        """The node's connection to ``curator``, as the connector makes it."""
        channel = secure_channel(curator.endpoint, self.credentials, node_id=curator.node_id)
        self.stack.push_async_callback(channel.close, None)
        return CuratorConnection(
            self.credentials.node_id, curator.node_id, curator.endpoint, channel
        )
