"""The names a connection checks, apart from the certificates that carry them: a client
that only connects (``roleserve ctl``, ``rpc``'s channels) needs these, not cryptography."""

from __future__ import annotations

__all__ = ["ANY_NODE_NAME", "NODE_ID_PREFIX"]

NODE_ID_PREFIX = "node-"
"""What every node ID starts with (then 32 hex digits: see ``node_id``)."""

ANY_NODE_NAME = "any-node.roleserve.invalid"
"""A second DNS name of every node certificate. A client that must reach *some* node of the
cluster but does not know which (a seed address) verifies the server against this name;
gRPC always checks a name, and only node certificates carry this one. ``.invalid`` is
reserved (RFC 2606), so it can never be a real host's name."""
