"""Example plugin: workers that run while the node has the custom role ``hello``.

- ``hello`` publishes the role's greeting parameter (values: a worker gated on a role),
  else the ``greeting`` setting of ``[plugins.hello]`` in roleserve.toml (settings).
- ``hello_neighbours`` publishes the other nodes that are UP, from ``cluster_nodes``: the
  core's one Watch of every node, kept while some running worker reads it.

Both leave a value that says "not running" when they stop (values cannot be unset).

Values: owns ``hello_greeting`` and ``hello_neighbours``; its workers read ``roles``,
``node_id`` and ``cluster_nodes``.
"""

from __future__ import annotations

from typing import Any

import anyio

from roleserve_core import (
    CLUSTER_NODES,
    NODE_ID,
    ROLES,
    NodeContext,
    NodeRoles,
    RunContext,
    Setting,
    ValueKey,
    Worker,
    common_pb2,
    curator_pb2,
    custom_role,
    follow_changes,
    hookimpl,
)

ROLESERVE_PLUGIN_API = 1

ROLE = "hello"
"""The custom role this plugin's workers are gated on."""

NO_GREETING = ""
"""``hello_greeting`` while the ``hello`` worker does not run (the node lacks the role)."""
NO_NEIGHBOURS: tuple[str, ...] = ()
"""``hello_neighbours`` while the ``hello_neighbours`` worker does not run."""

GREETING: ValueKey[str] = ValueKey(
    "hello_greeting",
    str,
    "The greeting parameter of the 'hello' role while this node has the role; '' once the "
    "role is gone (unset until the node first has it).",
)
NEIGHBOURS: ValueKey[tuple[str, ...]] = ValueKey(
    "hello_neighbours",
    tuple,
    "The IDs of the other nodes that are UP, sorted, while this node has the 'hello' role; "
    "() once the role is gone (unset until the node first has it).",
)


DEFAULT_GREETING: Setting[str] = Setting(
    "greeting", str, "hello", "The greeting of a node whose hello role gives none."
)
"""``[plugins.hello] greeting = "..."`` in roleserve.toml; the core checks it is a string."""


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.hello]`` accepts."""
    return [DEFAULT_GREETING]


has_hello_role = custom_role(ROLE)
"""The workers' gate: the node has the custom role ``hello``. Made with ``custom_role``
rather than a lambda, so the node reports that it handles ``hello`` and ``roleserve ctl
roles set`` warns about a typo such as ``custom:helo``."""


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """This plugin owns the greeting and the neighbours."""
    return [GREETING, NEIGHBOURS]


@hookimpl
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """Two workers, both gated on the ``hello`` role."""
    default = DEFAULT_GREETING.read(node.config)

    async def hello(ctx: RunContext) -> None:
        """Publishes the hello role's greeting while the node has the role."""
        try:
            with node.values.watch(ROLES) as roles:
                current = await roles.get()
                node.values.set(GREETING, _greeting(current, default))
                ctx.signal_healthy()
                ctx.log.info("greeting: %s", _greeting(current, default))
                async for current in roles:
                    if has_hello_role(current):
                        node.values.set(GREETING, _greeting(current, default))
        finally:
            # The core cancels this worker when the role goes: say so, or readers keep
            # the last greeting. set() never blocks, so it is safe while being cancelled.
            node.values.set(GREETING, NO_GREETING)

    async def hello_neighbours(ctx: RunContext) -> None:
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
        Worker("hello", hello, when=has_hello_role, reads=(ROLES,)),
        Worker(
            "hello_neighbours",
            hello_neighbours,
            when=has_hello_role,
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
