"""Example plugin: a worker that runs while the node has the custom role ``hello``.

Values: owns ``hello_greeting``; its worker reads ``roles``.
"""

from __future__ import annotations

from typing import Any

import anyio

from roleserve_core import NodeContext, NodeRoles, RunContext, ValueKey, Worker, hookimpl
from roleserve_core.keys import ROLES

ROLESERVE_PLUGIN_API = 1

ROLE = "hello"
"""The custom role this plugin's worker is gated on."""

GREETING: ValueKey[str] = ValueKey(
    "hello_greeting",
    str,
    "The greeting parameter of the 'hello' role, while this node has the role.",
)


def has_hello_role(roles: NodeRoles) -> bool:
    """The worker's gate: the node has the custom role ``hello``."""
    return ROLE in roles.custom


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """This plugin owns the greeting."""
    return [GREETING]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """One worker, gated on the ``hello`` role."""

    async def hello(ctx: RunContext) -> None:
        """Publishes the hello role's greeting while the node has the role."""
        with node.values.watch(ROLES) as roles:
            current = await roles.get()
            node.values.set(GREETING, _greeting(current))
            ctx.signal_healthy()
            ctx.log.info("greeting: %s", _greeting(current))
            async for current in roles:
                if has_hello_role(current):
                    node.values.set(GREETING, _greeting(current))

    return [Worker("hello", hello, when=has_hello_role, reads=(ROLES,))]


def _greeting(roles: NodeRoles) -> str:
    return roles.custom.get(ROLE, {}).get("greeting", "hello")


@hookimpl
async def on_roles(roles: NodeRoles, node: NodeContext) -> None:
    """Log each role change (an async hook: the core awaits it)."""
    await anyio.lowlevel.checkpoint()
    node.log.info("roles are now: %s", ", ".join(roles.names()) or "none")
