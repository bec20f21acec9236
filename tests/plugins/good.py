"""A well-behaved test plugin: one value of its own per hook, and a gated worker.

Values: owns ``good_roles`` and ``good_connection``, which its hooks set to what they were
last called with; its worker reads ``roles``.
"""

from __future__ import annotations

from typing import Any

import anyio

from roleserve_core import NodeContext, NodeRoles, RunContext, ValueKey, Worker, hookimpl
from roleserve_core.values import ROLES, CuratorConnection

ROLESERVE_PLUGIN_API = 1

ROLE = "good"
"""The custom role the worker is gated on."""

LAST_ROLES: ValueKey[NodeRoles] = ValueKey("good_roles", NodeRoles, "Roles on_roles last got.")
LAST_CONNECTION: ValueKey[CuratorConnection] = ValueKey(
    "good_connection", CuratorConnection, "The connection on_curator_connection last got."
)


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The keys the hooks below set."""
    return [LAST_ROLES, LAST_CONNECTION]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """One worker, gated on the custom role ``good``."""
    return [Worker("good_worker", run_good, when=has_good_role, reads=(ROLES,))]


def has_good_role(roles: NodeRoles) -> bool:
    """The worker's gate."""
    return ROLE in roles.custom


async def run_good(ctx: RunContext) -> None:
    """Runs while the node has the role good."""
    ctx.signal_healthy()
    await anyio.sleep_forever()


@hookimpl
async def on_roles(roles: NodeRoles, node: NodeContext) -> None:
    """An async implementation: the core awaits it."""
    await anyio.lowlevel.checkpoint()
    node.values.set(LAST_ROLES, roles)


@hookimpl
def on_curator_connection(connection: CuratorConnection, node: NodeContext) -> None:
    """A sync implementation."""
    node.values.set(LAST_CONNECTION, connection)
