"""The scope of a user certificate: how much of the cluster its holder may do.

::

    user certificate ── extension SCOPE_OID (non-critical) ── DER UTF8String "viewer"
          │                                                   absent: "owner"
          ▼
    certificate_scope() ──▶ "owner" | "operator" | "viewer" | "metrics" | anything else
          │
          ▼ rpc.SCOPE_PERMISSIONS (an unknown name: no permission at all)
    the permissions the authorization interceptor checks

The extension sits under ``2.25`` (ITU-T X.667: an OID made of a UUID, which needs no
registration) and is **non-critical**: TLS stacks refuse a certificate with a critical
extension they do not understand, and the TLS layer only checks the chain; what the scope
allows is the interceptor's business. A certificate without the extension is an owner
certificate: every user certificate issued before scopes existed (the owner's, written at
bootstrap) keeps doing what it did.

The scope is only read from certificates the interceptor already verified against the
cluster CA, so it is as trustworthy as the CA's signature over it.
"""

from __future__ import annotations

import enum

from cryptography import x509

__all__ = ["SCOPE_OID", "Scope", "certificate_scope", "scope_extension"]

SCOPE_OID = x509.ObjectIdentifier("2.25.339849260656971510891440090394777831165")
"""The OID of the scope extension (``2.25.<UUID as an integer>``, see the module doc)."""

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
    try:
        extension = certificate.extensions.get_extension_for_oid(SCOPE_OID).value
    except x509.ExtensionNotFound:
        return Scope.OWNER.value
    data = extension.value if isinstance(extension, x509.UnrecognizedExtension) else b""
    if len(data) < 2 or data[0] != _UTF8_STRING or data[1] != len(data) - 2:
        return ""
    try:
        return data[2:].decode()
    except UnicodeDecodeError:
        return ""
