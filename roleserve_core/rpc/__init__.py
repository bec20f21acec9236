"""gRPC with mutual TLS for roleserve: server credentials and authorization, client
channels that verify nodes by ID, peer identity for handlers, cancellation-safe calls.

::

    server: create_server(node credentials) + bind(address)   (requests ≤ 1 MiB,
            REQUEST_LIMITS; one that does not parse: INVALID_ARGUMENT)
            └─ AuthorizationInterceptor: each method's authorization option vs. the peer
               (a user: its certificate's scope), the server's NodeGate (nodes refused
               although certified: decommissioned) and Revocations (revoked users)
               └─ handler: current_peer() → NodePeer | UserPeer | UnauthenticatedPeer
    client: secure_channel(target, credentials, node_id=...)  (verifies: a node of the
            cluster, or exactly that node; never by host name; keepalive pings: a hung
            server fails the channel's calls within ~15 s, KEEPALIVE_OPTIONS / _POLICY;
            a refused connection is tried again after 0.25 s, RECONNECT_OPTIONS)
            └─ unary calls awaited through unary(): anyio cancellation stays anyio's

Modules: ``_authorization`` (method options, permissions, scopes), ``_peer`` (classifying callers),
``_server``, ``_client``, ``_unary``.
"""

from roleserve_core._public import publish
from roleserve_core.rpc._authorization import (
    NODE_PERMISSIONS,
    SCOPE_PERMISSIONS,
    USER_PERMISSIONS,
    MethodAuthorization,
    Permission,
    method_authorization,
    permission_name,
    scope_permissions,
    smallest_scope,
)
from roleserve_core.rpc._client import (
    CHANNEL_OPTIONS,
    KEEPALIVE_OPTIONS,
    RECONNECT_OPTIONS,
    CancellationSafeChannel,
    channel_credentials,
    secure_channel,
    until_ready,
)
from roleserve_core.rpc._peer import (
    NodePeer,
    Peer,
    PeerClassifier,
    UnauthenticatedPeer,
    UserPeer,
    current_peer,
)
from roleserve_core.rpc._server import (
    KEEPALIVE_POLICY,
    LEADER_STARTING_METADATA,
    NODE_REFUSED_METADATA,
    REQUEST_LIMITS,
    REVOKED_METADATA,
    AuthorizationInterceptor,
    NodeGate,
    Revocations,
    bind,
    create_server,
    leader_starting,
    node_refusal,
    server_credentials,
    user_revocation,
)
from roleserve_core.rpc._unary import CancellationSafeCall, unary

__all__ = [
    "CHANNEL_OPTIONS",
    "KEEPALIVE_OPTIONS",
    "KEEPALIVE_POLICY",
    "LEADER_STARTING_METADATA",
    "NODE_PERMISSIONS",
    "NODE_REFUSED_METADATA",
    "RECONNECT_OPTIONS",
    "REQUEST_LIMITS",
    "REVOKED_METADATA",
    "SCOPE_PERMISSIONS",
    "USER_PERMISSIONS",
    "AuthorizationInterceptor",
    "CancellationSafeCall",
    "CancellationSafeChannel",
    "MethodAuthorization",
    "NodeGate",
    "NodePeer",
    "Peer",
    "PeerClassifier",
    "Permission",
    "Revocations",
    "UnauthenticatedPeer",
    "UserPeer",
    "bind",
    "channel_credentials",
    "create_server",
    "current_peer",
    "leader_starting",
    "method_authorization",
    "node_refusal",
    "permission_name",
    "scope_permissions",
    "secure_channel",
    "server_credentials",
    "smallest_scope",
    "unary",
    "until_ready",
    "user_revocation",
]

# Its classes report this package (or the top level) as theirs: see _public.
publish(__name__, globals(), __all__)
