"""Cluster identity: keys, node IDs, the cluster CA, certificates and credentials.

::

    generate_key() ──▶ P-256 key ──node_id()──▶ "node-" + 32 hex (SHA-256 of the SPKI)
          │
    create_ca(key) ──▶ cluster CA ──issue_node_certificate()──▶ node certificate
                                  └─issue_user_certificate()──▶ user certificate
    issue_ephemeral_certificate(key) ──▶ ephemeral certificate (enrolment CA)
    certificate_scope(user certificate) ──▶ "owner" | "operator" | "viewer" | "metrics"

    verify_node_certificate / verify_user_certificate / verify_ephemeral_certificate
    NodeCredentials / UserCredentials: key + certificate + CA, checked, saved, loaded

Modules: ``_keys`` (keys, IDs, PEM), ``_certificates`` (issuing), ``_verify`` (checking),
``_credentials`` (what a peer connects with, on disk), ``_scope`` (what a user may do).
"""

from roleserve_core._public import publish
from roleserve_core.identity._certificates import (
    ANY_NODE_NAME,
    CA_NAME,
    CLOCK_SKEW,
    DEFAULT_VALIDITY,
    create_ca,
    enrolment_ca,
    issue_certificate,
    issue_ephemeral_certificate,
    issue_node_certificate,
    issue_user_certificate,
    signing_request,
)
from roleserve_core.identity._credentials import (
    CA_FILE,
    CERTIFICATE_FILE,
    KEY_FILE,
    Credentials,
    EphemeralCredentials,
    NodeCredentials,
    UserCredentials,
)
from roleserve_core.identity._keys import (
    NODE_ID_PREFIX,
    PrivateKey,
    PublicKey,
    certificate_from_pem,
    certificate_to_pem,
    generate_key,
    node_id,
    private_key_from_pem,
    private_key_to_pem,
    public_key_der,
    public_key_from_der,
)
from roleserve_core.identity._scope import (
    LEGACY_SCOPE_OID,
    SCOPE_OID,
    Scope,
    certificate_scope,
    scope_extension,
)
from roleserve_core.identity._verify import (
    verify_ca,
    verify_ephemeral_certificate,
    verify_node_certificate,
    verify_user_certificate,
)

__all__ = [
    "ANY_NODE_NAME",
    "CA_FILE",
    "CA_NAME",
    "CERTIFICATE_FILE",
    "CLOCK_SKEW",
    "DEFAULT_VALIDITY",
    "KEY_FILE",
    "LEGACY_SCOPE_OID",
    "NODE_ID_PREFIX",
    "SCOPE_OID",
    "Credentials",
    "EphemeralCredentials",
    "NodeCredentials",
    "PrivateKey",
    "PublicKey",
    "Scope",
    "UserCredentials",
    "certificate_from_pem",
    "certificate_scope",
    "certificate_to_pem",
    "create_ca",
    "enrolment_ca",
    "generate_key",
    "issue_certificate",
    "issue_ephemeral_certificate",
    "issue_node_certificate",
    "issue_user_certificate",
    "node_id",
    "private_key_from_pem",
    "private_key_to_pem",
    "public_key_der",
    "public_key_from_der",
    "scope_extension",
    "signing_request",
    "verify_ca",
    "verify_ephemeral_certificate",
    "verify_node_certificate",
    "verify_user_certificate",
]

# Its classes report this package (or the top level) as theirs: see _public.
publish(__name__, globals(), __all__)
