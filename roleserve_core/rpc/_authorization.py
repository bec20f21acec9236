"""Who may call what: the ``authorization`` option of each method, and who holds which
permission: nodes ``NODE_PERMISSIONS``, users those of the scope their certificate carries
(``SCOPE_PERMISSIONS``; see ``identity._scope``).

The option is read from the protobuf descriptor pool, where the generated modules put every
service; a method that has none, or that the pool does not know, has no authorization, and
the server refuses it. Lookups are cached: there are a few dozen methods.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import MethodDescriptor

from roleserve_core._public import publish
from roleserve_core.identity import Scope
from roleserve_core.proto import (  # noqa: F401 - imported to register the services
    authorization_pb2,
    curator_pb2,
    management_pb2,
    nodemanagement_pb2,
)

__all__ = [
    "NODE_PERMISSIONS",
    "SCOPE_PERMISSIONS",
    "USER_PERMISSIONS",
    "MethodAuthorization",
    "Permission",
    "method_authorization",
    "permission_name",
    "request_type",
    "scope_permissions",
    "smallest_scope",
]

Permission = authorization_pb2.Permission
"""The permission enum of ``authorization.proto`` (``Permission.MANAGE_CLUSTER``, ...)."""

NODE_PERMISSIONS: frozenset[int] = frozenset(
    {authorization_pb2.READ_CLUSTER_STATUS, authorization_pb2.UPDATE_NODE_SELF}
)
"""What every node of the cluster may do."""

_VIEWER = frozenset({authorization_pb2.READ_CLUSTER_STATUS, authorization_pb2.READ_NODE})
_OPERATOR = _VIEWER | {
    authorization_pb2.OPERATE_NODE,
    authorization_pb2.MANAGE_ROLES,
    authorization_pb2.MANAGE_NODES,
}

SCOPE_PERMISSIONS: dict[str, frozenset[int]] = {
    Scope.OWNER: _OPERATOR
    | {
        authorization_pb2.MANAGE_CLUSTER,
        authorization_pb2.MANAGE_CREDENTIALS,
        authorization_pb2.SCRAPE_METRICS,
    },
    Scope.OPERATOR: _OPERATOR,
    Scope.VIEWER: _VIEWER,
    Scope.METRICS: frozenset({authorization_pb2.SCRAPE_METRICS}),
}
"""What a user certificate of each scope may do; docs/wire-api.md has the same table.
Operators do not scrape metrics: a scope that may do everything else may not read them
without asking, so the metrics scope stays the one way to hand out scraping."""

USER_PERMISSIONS: frozenset[int] = SCOPE_PERMISSIONS[Scope.OWNER]
"""What the owner may do: every permission but a node's own (UPDATE_NODE_SELF)."""


def scope_permissions(scope: str) -> frozenset[int]:
    """The permissions of the scope named ``scope``; none for a name no scope has (a
    certificate from a newer cluster, or a malformed extension: fail safe)."""
    return SCOPE_PERMISSIONS.get(scope, frozenset())


def smallest_scope(needed: frozenset[int]) -> str | None:
    """The scope with the fewest permissions that holds every one of ``needed``; None if
    no user scope does (a node's permission)."""
    holding = [scope for scope, held in SCOPE_PERMISSIONS.items() if needed <= held]
    return min(holding, key=lambda scope: len(SCOPE_PERMISSIONS[scope]), default=None)


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
    descriptor = _method_descriptor(method)
    if descriptor is None:
        return None
    options = descriptor.GetOptions()
    if not options.HasExtension(authorization_pb2.authorization):
        return None
    option = options.Extensions[authorization_pb2.authorization]
    return MethodAuthorization(frozenset(option.need), option.allow_unauthenticated)


@functools.cache
def request_type(method: str) -> str | None:
    """The full name of the request message of ``/package.Service/Method``; None if the
    descriptor pool does not know the method."""
    descriptor = _method_descriptor(method)
    return None if descriptor is None else descriptor.input_type.full_name


def _method_descriptor(method: str) -> MethodDescriptor | None:
    """The descriptor of ``/package.Service/Method``; None if the pool does not know it."""
    service_name, _, method_name = method.lstrip("/").partition("/")
    try:
        service = descriptor_pool.Default().FindServiceByName(service_name)
    except KeyError:
        return None
    descriptor: MethodDescriptor | None = service.methods_by_name.get(method_name)
    return descriptor


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.rpc", globals(), __all__)
