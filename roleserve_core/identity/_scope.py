"""The scope of a user certificate: how much of the cluster its holder may do.

::

    user certificate ── extension SCOPE_OID (non-critical) ── DER UTF8String "viewer"
          │                                                   absent: "owner"
          ▼
    certificate_scope() ──▶ "owner" | "operator" | "viewer" | "metrics" | anything else
          │
          ▼ rpc.SCOPE_PERMISSIONS (an unknown name: no permission at all)
    the permissions the authorization interceptor checks

The extension's OID is made of a UUID without registration, the way Microsoft's arc
``1.2.840.113556.1.8000.2554`` allows anyone to (the UUID's 128 bits in seven arcs of 16 and
24 bits), and it is **non-critical**: TLS stacks refuse a certificate with a critical
extension they do not understand, and the TLS layer only checks the chain; what the scope
allows is the interceptor's business. Not ``2.25.<the UUID as one integer>`` (ITU-T X.667),
which the first version used: Go's x509 parser refuses any OID arc of 2^31 or more
("x509: malformed extension OID field"), so Prometheus, etcdctl or kubectl could not load a
scoped certificate at all (a metrics certificate is made for Prometheus). A certificate
with that first OID (``LEGACY_SCOPE_OID``) is still read as its scope, never as an owner's.
A certificate without either extension is an owner certificate: every user certificate
issued before scopes existed (the owner's, written at bootstrap) keeps doing what it did.

The scope is only read from certificates the interceptor already verified against the
cluster CA, so it is as trustworthy as the CA's signature over it.
"""

from __future__ import annotations

import enum

from cryptography import x509

from roleserve_core._public import publish

__all__ = ["LEGACY_SCOPE_OID", "SCOPE_OID", "Scope", "certificate_scope", "scope_extension"]

SCOPE_OID = x509.ObjectIdentifier(
    "1.2.840.113556.1.8000.2554.65452.38454.26791.17227.45007.11338280.9914109"
)
"""The OID of the scope extension: UUID ffac9636-68a7-434b-afcf-ad02289746fd under
Microsoft's arc for unregistered OIDs, every arc below 2^24 (see the module doc)."""
LEGACY_SCOPE_OID = x509.ObjectIdentifier("2.25.339849260656971510891440090394777831165")
"""The same UUID as ``2.25.<one integer>``: what the first version issued, which Go cannot
parse; read, never issued."""

_UTF8_STRING = 0x0C
"""The DER tag of a UTF8String."""


class Scope(enum.StrEnum):
    """The scopes a user certificate may carry, from the most to the least it may do."""

    OWNER = "owner"
    """Everything, including issuing and revoking credentials."""
    OPERATOR = "operator"
    """Roles, approvals, decommissioning, and every node's management (restarts too)."""
    VIEWER = "viewer"
    """Reading: cluster status, nodes, supervision trees, values, logs."""
    METRICS = "metrics"
    """Scraping metrics, nothing else."""


def scope_extension(scope: Scope) -> x509.UnrecognizedExtension:
    """The extension that carries ``scope``: a DER UTF8String of its name."""
    name = scope.value.encode()
    assert len(name) < 0x80, "short-form DER length only"
    return x509.UnrecognizedExtension(SCOPE_OID, bytes([_UTF8_STRING, len(name)]) + name)


def certificate_scope(certificate: x509.Certificate) -> str:
    """The scope name ``certificate`` carries: ``owner`` without the extension.

    An extension that is not a short DER UTF8String gives ``""``, which no scope is named,
    so such a certificate holds no permission (fail safe), rather than being an owner's.
    """
    extension = None
    for oid in (SCOPE_OID, LEGACY_SCOPE_OID):
        try:
            extension = certificate.extensions.get_extension_for_oid(oid).value
        except x509.ExtensionNotFound:
            continue
        break
    if extension is None:
        return Scope.OWNER.value
    data = extension.value if isinstance(extension, x509.UnrecognizedExtension) else b""
    if len(data) < 2 or data[0] != _UTF8_STRING or data[1] != len(data) - 2:
        return ""
    try:
        return data[2:].decode()
    except UnicodeDecodeError:
        return ""


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.identity", globals(), __all__)
