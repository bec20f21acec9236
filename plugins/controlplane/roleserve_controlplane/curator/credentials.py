"""User credentials the leader issues and revokes, and the revoked serials it refuses.

::

    IssueCredentials(name, scope, CSR)  the key never leaves the caller: the CSR proves it
        └─▶ user certificate (CN = name, the scope extension) ─▶ /credentials/<name>
            CredentialsRecord, created once (version == 0): a name is never issued twice
    RevokeCredentials(name) ─▶ the record's ``revoked`` set (compare-and-swap on its revision)

    etcd /credentials/ ──one watch──▶ RevokedSerials {serial}
                                          ├─▶ AuthorizationInterceptor refuses those users
                                          └─▶ Curator.WatchRevokedCredentials ─▶ every
                                              node's ``revocations`` worker ─▶ its node
                                              management server refuses them too

Only the leading curator serves user calls (the others answer every authenticated call with
"not the leader"), and each new leader loads the records before serving: so "every curator
refuses a revoked certificate" is this watch on the leader, seconds at most after the write.

Records stay after revocation, so that the serial stays refused; and a name, once issued, is
not issued again, so a name always means one certificate in ``ctl credentials list``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import anyio
import grpc
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec

from roleserve_controlplane.consensus import EtcdClient, EventKind, KeyValue, WatchEvent
from roleserve_controlplane.curator.authority import ClusterAuthority
from roleserve_controlplane.curator.errors import RefusedError
from roleserve_controlplane.curator.state import ClusterState
from roleserve_controlplane.curator.validation import shown
from roleserve_controlplane.proto import state_pb2
from roleserve_core.identity import PublicKey, Scope, certificate_to_pem
from roleserve_core.limits import (
    MAX_CREDENTIALS_NAME_LENGTH,
    MAX_CSR_BYTES,
    check_bytes,
    check_text,
)

__all__ = [
    "CREDENTIALS_PREFIX",
    "RevokedSerials",
    "credentials_key",
    "csr_key",
    "issue_credentials",
    "list_credentials",
    "revoke_credentials",
    "serial_text",
]

log = logging.getLogger("roleserve.curator")

CREDENTIALS_PREFIX = "/credentials/"
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}\Z")
"""What a name may be: it is the certificate's CN and a path segment in etcd."""
RESERVED_NAMES = frozenset({"owner"})
"""The bootstrap's owner certificate is named so; another would be mistaken for it."""


def credentials_key(name: str) -> str:
    """The etcd key of the credentials issued under ``name``."""
    return CREDENTIALS_PREFIX + name


def serial_text(serial: int) -> str:
    """A serial number as records and listings show it: lowercase hex."""
    return format(serial, "x")


def _invalid(message: str) -> RefusedError:
    return RefusedError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _checked_name(name: str) -> str:
    if not NAME.match(name):
        raise _invalid(
            f"credentials name {shown(name)} is not 1-63 of a-z, 0-9, '.', '_', '-' "
            "(starting with a letter or digit)"
        )
    if name in RESERVED_NAMES:
        raise _invalid(f"credentials name {name!r} is the bootstrap owner's; pick another")
    return name


def _checked_scope(scope: str) -> Scope:
    try:
        return Scope(scope)
    except ValueError:
        names = ", ".join(s.value for s in Scope)
        raise _invalid(f"scope {shown(scope)} is none of {names}") from None


def csr_key(csr: bytes) -> PublicKey:
    """The key a CSR proves its sender holds (its signature checks out with it); refused
    (INVALID_ARGUMENT) if it is not valid DER PKCS#10 of a P-256 key signed by it. Also for
    plugins' curator services that issue certificates (the Kubernetes admin's)."""
    check_bytes("csr", csr, MAX_CSR_BYTES)
    try:
        request = x509.load_der_x509_csr(csr)
        key = request.public_key()
        valid = request.is_signature_valid
    # cryptography's parse failures, and a well-formed key or signature of an algorithm it
    # cannot load: the caller's bad input either way.
    except (ValueError, UnsupportedAlgorithm):
        raise _invalid("the certificate signing request is not valid DER PKCS#10") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise _invalid("the certificate signing request's key is not ECDSA P-256")
    if not valid:
        raise _invalid("the certificate signing request is not signed by its key")
    return key


async def issue_credentials(
    state: ClusterState, authority: ClusterAuthority, name: str, scope: str, csr: bytes
) -> x509.Certificate:
    """Sign a user certificate of ``scope`` named ``name`` for the CSR's key, and record it.

    :raises RefusedError: INVALID_ARGUMENT for a bad name, scope or CSR; ALREADY_EXISTS if
        ``name`` was issued before (revoked or not).
    """
    checked = _checked_scope(scope)
    key = csr_key(csr)
    certificate = authority.user_certificate(key, _checked_name(name), checked)
    record = state_pb2.CredentialsRecord(
        name=name,
        scope=checked.value,
        serial=serial_text(certificate.serial_number),
        certificate=certificate_to_pem(certificate),
    )
    if not await state.create(credentials_key(name), record):
        raise RefusedError(
            grpc.StatusCode.ALREADY_EXISTS,
            f"credentials named {name!r} were issued before; names are not reused: pick another",
        )
    return certificate


async def list_credentials(state: ClusterState) -> list[state_pb2.CredentialsRecord]:
    """Every issued credentials record, sorted by name."""
    stored, _ = await state.client.get_prefix(CREDENTIALS_PREFIX)
    records = [_record(kv.value) for kv in stored]
    return sorted(records, key=lambda record: record.name)


async def revoke_credentials(state: ClusterState, name: str) -> None:
    """Mark the credentials issued under ``name`` revoked (again: nothing changes).

    :raises RefusedError: NOT_FOUND if none were issued under it.
    """
    check_text("name", name, MAX_CREDENTIALS_NAME_LENGTH)
    while True:
        stored = await state.client.get(credentials_key(name))
        if stored is None:
            raise RefusedError(
                grpc.StatusCode.NOT_FOUND,
                f"no credentials named {shown(name)}; `ctl credentials list` shows the names",
            )
        record = _record(stored.value)
        if record.revoked:
            return
        record.revoked = True
        if await state.replace(credentials_key(name), record, stored.mod_revision):
            log.info("revoked credentials %s (serial %s)", name, record.serial)
            return


def _record(data: bytes) -> state_pb2.CredentialsRecord:
    record = state_pb2.CredentialsRecord()
    record.ParseFromString(data)
    return record


class RevokedSerials:
    """The serials of every revoked user certificate, kept current by one etcd watch of
    ``/credentials/`` (the node cache's way, ``cache.py``); the interceptor asks it on each
    call of a user (``roleserve_core.rpc.Revocations``)."""

    def __init__(self, client: EtcdClient) -> None:
        self.client = client
        self.ready = anyio.Event()
        """Set once the records are loaded."""
        self._revoked: dict[str, int] = {}
        """Record name → its serial, for the revoked ones."""
        self._serials: frozenset[int] = frozenset()
        self._changed = anyio.Event()
        """Set (and replaced) at each change of the serials."""

    def revoked(self, serial: int) -> bool:
        """Whether the certificate with ``serial`` was revoked."""
        return serial in self._serials

    @property
    def serials(self) -> frozenset[int]:
        """Every revoked serial, now."""
        return self._serials

    async def wait_revoked(self, serial: int) -> None:
        """Return once ``serial`` is revoked (the interceptor ends that user's streams)."""
        while serial not in self._serials:
            await self._changed.wait()

    async def wait_changed(self, seen: frozenset[int]) -> frozenset[int]:
        """The revoked serials, once they differ from ``seen`` (for the nodes' stream)."""
        while self._serials == seen:
            await self._changed.wait()
        return self._serials

    async def run(self) -> None:
        """Load the records, then follow every change until cancelled (reloading after a
        gap: ``EtcdClient.mirror_prefix``)."""
        await self.client.mirror_prefix(CREDENTIALS_PREFIX, load=self._load, apply=self._change)

    async def _load(self, stored: Sequence[KeyValue], revision: int) -> None:
        self._revoked = {}
        for kv in stored:
            self._apply(_record(kv.value))
        self.ready.set()

    def _change(self, event: WatchEvent) -> None:
        if event.kind is not EventKind.DELETE:
            self._apply(_record(event.value))

    def _apply(self, record: state_pb2.CredentialsRecord) -> None:
        if record.revoked:
            self._revoked[record.name] = int(record.serial, 16)
            serials = frozenset(self._revoked.values())
            if serials != self._serials:
                self._serials = serials
                changed, self._changed = self._changed, anyio.Event()
                changed.set()
