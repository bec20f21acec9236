"""Who is calling: the peer of an RPC, as the server's interceptor classifies it.

::

    client certificate (verified by TLS against the cluster CA or the enrolment CA)
        ├── a node certificate of the cluster ──▶ NodePeer(node_id, permissions)
        ├── a user certificate of the cluster ──▶ UserPeer(identity, permissions of its
        │                                          scope, scope, serial)
        └── an ephemeral certificate ───────────▶ UnauthenticatedPeer(public_key)

Handlers read the peer with ``current_peer()``; the interceptor sets it for each call.
Classifying verifies a signature, so results are cached by certificate (a client presents
the same one on every call of a connection); the cache re-checks validity times on use.
"""

from __future__ import annotations

import contextvars
import datetime
import functools
from dataclasses import dataclass

import grpc
from cryptography import x509

from roleserve_core._public import publish
from roleserve_core.errors import CertificateVerificationError, IdentityError
from roleserve_core.identity import (
    PublicKey,
    certificate_from_pem,
    certificate_scope,
    verify_ephemeral_certificate,
    verify_node_certificate,
    verify_user_certificate,
)
from roleserve_core.rpc._authorization import NODE_PERMISSIONS, scope_permissions

__all__ = [
    "NodePeer",
    "Peer",
    "PeerClassifier",
    "UnauthenticatedPeer",
    "UserPeer",
    "current_peer",
]


@dataclass(frozen=True, slots=True)
class NodePeer:
    """A node of the cluster, by its node certificate."""

    node_id: str
    permissions: frozenset[int]


@dataclass(frozen=True, slots=True)
class UserPeer:
    """A user of the cluster, by its user certificate."""

    identity: str
    permissions: frozenset[int]
    """Those of its scope (``SCOPE_PERMISSIONS``)."""
    scope: str = "owner"
    """The scope its certificate carries (``owner`` if none: see ``identity._scope``)."""
    serial: int = 0
    """Its certificate's serial number, which revocation names."""


@dataclass(frozen=True, slots=True)
class UnauthenticatedPeer:
    """A caller without a certificate of the cluster.

    ``public_key`` is the key its ephemeral certificate proves it holds (the TLS handshake
    is the proof); None if it presented no usable certificate at all.
    """

    public_key: PublicKey | None

    @property
    def permissions(self) -> frozenset[int]:
        """None: an unauthenticated caller holds no permission."""
        return frozenset()


Peer = NodePeer | UserPeer | UnauthenticatedPeer

_CURRENT_PEER: contextvars.ContextVar[Peer] = contextvars.ContextVar("roleserve_peer")


def current_peer() -> Peer:
    """The peer of the RPC being handled.

    :raises LookupError: outside a handler behind the authorization interceptor.
    """
    try:
        return _CURRENT_PEER.get()
    except LookupError:
        raise LookupError(
            "current_peer() outside an RPC handler served with the authorization interceptor"
        ) from None


def _set_current_peer(peer: Peer) -> None:
    # Each RPC runs in a task of its own, with its own copy of the context: no reset needed.
    _CURRENT_PEER.set(peer)


@dataclass(frozen=True, slots=True)
class _Verdict:
    peer: Peer
    not_before: datetime.datetime
    not_after: datetime.datetime


class PeerClassifier:
    """Classifies the client certificates of one cluster (one CA)."""

    def __init__(
        self,
        ca: x509.Certificate,
        *,
        node_permissions: frozenset[int] = NODE_PERMISSIONS,
        cache_size: int = 4096,
    ) -> None:
        self.ca = ca
        self.node_permissions = node_permissions
        self._classify_pem = functools.lru_cache(maxsize=cache_size)(self._classify)

    def peer(self, context: grpc.aio.ServicerContext[object, object]) -> Peer:
        """The peer of the call ``context`` belongs to."""
        certificates = list(context.auth_context().get("x509_pem_cert", []))
        if len(certificates) != 1:
            return UnauthenticatedPeer(None)
        verdict = self._classify_pem(certificates[0])
        now = datetime.datetime.now(datetime.UTC)
        if not verdict.not_before <= now <= verdict.not_after:
            return UnauthenticatedPeer(None)  # expired since it was cached
        return verdict.peer

    def classify(self, certificate: x509.Certificate) -> Peer:
        """The peer presenting ``certificate`` (uncached; for tests and tools)."""
        return self._verdict(certificate).peer

    def _classify(self, pem: bytes) -> _Verdict:
        try:
            certificate = certificate_from_pem(pem)
        except IdentityError:
            return _Verdict(UnauthenticatedPeer(None), _EPOCH, _EPOCH)
        return self._verdict(certificate)

    def _verdict(self, certificate: x509.Certificate) -> _Verdict:
        start, end = certificate.not_valid_before_utc, certificate.not_valid_after_utc
        try:
            node = verify_node_certificate(certificate, self.ca)
            return _Verdict(NodePeer(node, self.node_permissions), start, end)
        except CertificateVerificationError:
            pass
        try:
            user = verify_user_certificate(certificate, self.ca)
            scope = certificate_scope(certificate)
            peer = UserPeer(user, scope_permissions(scope), scope, certificate.serial_number)
            return _Verdict(peer, start, end)
        except CertificateVerificationError:
            pass
        try:
            key = verify_ephemeral_certificate(certificate)
        except CertificateVerificationError:
            return _Verdict(UnauthenticatedPeer(None), start, end)
        return _Verdict(UnauthenticatedPeer(key), start, end)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.rpc", globals(), __all__)
