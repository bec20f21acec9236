"""Who may call what: the ``authorization`` option of each method, and who holds which
permission.

The option is read from the protobuf descriptor pool, where the generated modules put every
service; a method that has none, or that the pool does not know, has no authorization, and
the server refuses it. Lookups are cached: there are a few dozen methods.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from google.protobuf import descriptor_pool

from roleserve_core.proto import (  # noqa: F401 - imported to register the services
    authorization_pb2,
    curator_pb2,
    management_pb2,
    nodemanagement_pb2,
)

__all__ = [
    "NODE_PERMISSIONS",
    "USER_PERMISSIONS",
    "MethodAuthorization",
    "Permission",
    "method_authorization",
    "permission_name",
]

Permission = authorization_pb2.Permission
"""The permission enum of ``authorization.proto`` (``Permission.MANAGE_CLUSTER``, ...)."""

NODE_PERMISSIONS: frozenset[int] = frozenset(
    {authorization_pb2.READ_CLUSTER_STATUS, authorization_pb2.UPDATE_NODE_SELF}
)
"""What every node of the cluster may do."""

USER_PERMISSIONS: frozenset[int] = frozenset(
    {
        authorization_pb2.READ_CLUSTER_STATUS,
        authorization_pb2.MANAGE_CLUSTER,
        authorization_pb2.OPERATE_NODE,
    }
)
"""What a user of the cluster (the owner) may do."""


def permission_name(permission: int) -> str:
    """``MANAGE_CLUSTER`` for its number."""
    return authorization_pb2.Permission.Name(permission)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class MethodAuthorization:
    """The ``authorization`` option of one method."""

    need: frozenset[int]
    """Permissions the caller must all hold."""
    allow_unauthenticated: bool
    """Whether callers without a certificate of the cluster are let in."""


@functools.cache
def method_authorization(method: str) -> MethodAuthorization | None:
    """The authorization of ``/package.Service/Method``; None if it declares none.

    None also for a method the descriptor pool does not know: the server then refuses it.
    """
    service_name, _, method_name = method.lstrip("/").partition("/")
    try:
        service = descriptor_pool.Default().FindServiceByName(service_name)
    except KeyError:
        return None
    descriptor = service.methods_by_name.get(method_name)
    if descriptor is None:
        return None
    options = descriptor.GetOptions()
    if not options.HasExtension(authorization_pb2.authorization):
        return None
    option = options.Extensions[authorization_pb2.authorization]
    return MethodAuthorization(frozenset(option.need), option.allow_unauthenticated)
