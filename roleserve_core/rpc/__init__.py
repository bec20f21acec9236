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
            a refused connection is tried again after 0.25 s, RECONNECT_OPTIONS; no
            bandwidth probes on channels or servers, FLOW_CONTROL_OPTIONS)
            └─ unary calls awaited through unary(): anyio cancellation stays anyio's
    fan-out: a server given ENCRYPTION_OFFLOAD_OPTIONS, in a process that called
            enable_encryption_offload() before grpc loaded, encrypts and writes off the
            event loop (the leading curator's)

Modules: ``_authorization`` (method options, permissions, scopes), ``_peer`` (classifying callers),
``_server``, ``_client``, ``_unary``, ``_offload`` (encryption off the event loop).

The exports load on first use (``lazy_loader``; listed in ``__init__.pyi``): a client
(``roleserve ctl``) needs ``secure_channel`` without the server side (``_server``,
``_peer``: interceptors, the process runner's port checks, RPC statistics). Each private
module publishes its own classes (``_public``), whichever way it is first imported.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
