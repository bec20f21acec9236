"""A plugin written for plugin API 1, frozen: workers that run while the node has the
custom role ``api1``.

It is the example plugin (examples/hello) as plugin API 1 released it, renamed ``api1``
and otherwise unchanged: it imports what API 1 documented where API 1 put it, the core's
keys from ``roleserve_core.keys`` among them. It is never updated; the core keeps it
working while it accepts plugin API 1 (docs/plugin-guide.md, "The plugin API promise").

- ``api1`` publishes the role's greeting parameter (values: a worker gated on a role),
  else the ``greeting`` setting of ``[plugins.api1]`` in roleserve.toml (settings).
- ``api1_neighbours`` publishes the other nodes that are UP, from ``cluster_nodes``: the
  core's one Watch of every node, kept while some running worker reads it.

Both leave a value that says "not running" when they stop (values cannot be unset).

Values: owns ``api1_greeting`` and ``api1_neighbours``; its workers read ``roles``,
``node_id`` and ``cluster_nodes``.
"""

from __future__ import annotations

from typing import Any

import anyio

from roleserve_core import (
    NodeContext,
    NodeRoles,
    RunContext,
    Setting,
    ValueKey,
    Worker,
    custom_role,
    hookimpl,
)
from roleserve_core.clusternodes import follow_changes
from roleserve_core.keys import CLUSTER_NODES, NODE_ID, ROLES
from roleserve_core.proto import common_pb2, curator_pb2

ROLESERVE_PLUGIN_API = 1

ROLE = "api1"
"""The custom role this plugin's workers are gated on."""

NO_GREETING = ""
"""``api1_greeting`` while the ``api1`` worker does not run (the node lacks the role)."""
NO_NEIGHBOURS: tuple[str, ...] = ()
"""``api1_neighbours`` while the ``api1_neighbours`` worker does not run."""

GREETING: ValueKey[str] = ValueKey(
    "api1_greeting",
    str,
    "The greeting parameter of the 'api1' role while this node has the role; '' once the "
    "role is gone (unset until the node first has it).",
)
NEIGHBOURS: ValueKey[tuple[str, ...]] = ValueKey(
    "api1_neighbours",
    tuple,
    "The IDs of the other nodes that are UP, sorted, while this node has the 'api1' role; "
    "() once the role is gone (unset until the node first has it).",
)


DEFAULT_GREETING: Setting[str] = Setting(
    "greeting", str, "api1", "The greeting of a node whose api1 role gives none."
)
"""``[plugins.api1] greeting = "..."`` in roleserve.toml; the core checks it is a string."""


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.api1]`` accepts."""
    return [DEFAULT_GREETING]


has_api1_role = custom_role(ROLE)
"""The workers' gate: the node has the custom role ``api1``. Made with ``custom_role``
rather than a lambda, so the node reports that it handles ``api1`` and ``roleserve ctl
roles set`` warns about a typo such as ``custom:helo``."""


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """This plugin owns the greeting and the neighbours."""
    return [GREETING, NEIGHBOURS]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """Two workers, both gated on the ``api1`` role."""
    default = DEFAULT_GREETING.read(node.config)

    async def api1(ctx: RunContext) -> None:
        """Publishes the api1 role's greeting while the node has the role."""
        try:
            with node.values.watch(ROLES) as roles:
                current = await roles.get()
                node.values.set(GREETING, _greeting(current, default))
                ctx.signal_healthy()
                ctx.log.info("greeting: %s", _greeting(current, default))
                async for current in roles:
                    if has_api1_role(current):
                        node.values.set(GREETING, _greeting(current, default))
        finally:
            # The core cancels this worker when the role goes: say so, or readers keep
            # the last greeting. set() never blocks, so it is safe while being cancelled.
            node.values.set(GREETING, NO_GREETING)

    async def api1_neighbours(ctx: RunContext) -> None:
        """Publishes the other nodes that are UP while the node has the role."""
        try:
            with node.values.watch(NODE_ID) as ids:
                own_id = await ids.get()

            def neighbour(record: curator_pb2.Node) -> bool:
                return record.id != own_id and record.state == common_pb2.NODE_STATE_UP

            ctx.set_note("waiting for cluster_nodes")
            healthy = False
            # Only whether a node is a neighbour matters here, not what else its record
            # says (status, roles, labels): any two records of a neighbour are the same.
            # So each view yielded is one in which the neighbours changed; the first is
            # the whole cluster, also when no node is a neighbour.
            async for view, _ in follow_changes(
                node.values, include=neighbour, same=lambda old, new: True
            ):
                neighbours = tuple(sorted(n for n, record in view.items() if neighbour(record)))
                node.values.set(NEIGHBOURS, neighbours)
                ctx.log.info("neighbours: %s", ", ".join(neighbours) or "none")
                if not healthy:
                    healthy = True
                    ctx.set_note("")
                    ctx.signal_healthy()
        finally:
            node.values.set(NEIGHBOURS, NO_NEIGHBOURS)

    return [
        Worker("api1", api1, when=has_api1_role, reads=(ROLES,)),
        Worker(
            "api1_neighbours",
            api1_neighbours,
            when=has_api1_role,
            reads=(NODE_ID, CLUSTER_NODES),  # declaring it is what makes the core keep it
        ),
    ]


def _greeting(roles: NodeRoles, default: str) -> str:
    return roles.custom.get(ROLE, {}).get("greeting", default)


@hookimpl
async def on_roles(roles: NodeRoles, node: NodeContext) -> None:
    """Log each role change (an async hook: the core awaits it)."""
    await anyio.lowlevel.checkpoint()
    node.log.info("roles are now: %s", ", ".join(roles.names()) or "none")
