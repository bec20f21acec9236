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

``PemCredentials``: the three files as read, unparsed, which is all a TLS connection needs
(``TlsCredentials``: what a channel presents); ``Credentials.from_pem`` checks them. Modules
also ``_names`` (the names connections check) and ``_pem``.

The exports load on first use (``lazy_loader``; listed in ``__init__.pyi``): a client that
only connects (``roleserve ctl``) needs the names and the PEM, not cryptography, whose
import costs more than its calls. Each private module publishes its own classes
(``_public``), whichever way it is first imported.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
