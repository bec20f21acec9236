"""Example plugin: workers that run while the node has the custom role ``hello``.

- ``hello`` publishes the role's greeting parameter (values: a worker gated on a role),
  else the ``greeting`` setting of ``[plugins.hello]`` in roleserve.toml (settings).
- ``hello_neighbours`` keeps the list of the other nodes that are UP, from a Watch of the
  curator (calls to the control plane that survive a change of leader).

Values: owns ``hello_greeting`` and ``hello_neighbours``; its workers read ``roles`` and
``curator_connection``.
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
    hookimpl,
)
from roleserve_core.connection import on_each_connection
from roleserve_core.keys import CURATOR_CONNECTION, ROLES, CuratorConnection
from roleserve_core.proto import common_pb2, curator_pb2, curator_pb2_grpc

ROLESERVE_PLUGIN_API = 1

ROLE = "hello"
"""The custom role this plugin's worker is gated on."""

GREETING: ValueKey[str] = ValueKey(
    "hello_greeting",
    str,
    "The greeting parameter of the 'hello' role, while this node has the role.",
)
NEIGHBOURS: ValueKey[tuple[str, ...]] = ValueKey(
    "hello_neighbours",
    tuple,
    "The IDs of the other nodes that are UP, sorted, while this node has the 'hello' role.",
)


DEFAULT_GREETING: Setting[str] = Setting(
    "greeting", str, "hello", "The greeting of a node whose hello role gives none."
)
"""``[plugins.hello] greeting = "..."`` in roleserve.toml; the core checks it is a string."""


@hookimpl
def roleserve_settings() -> list[Setting[Any]]:
    """What ``[plugins.hello]`` accepts."""
    return [DEFAULT_GREETING]


def has_hello_role(roles: NodeRoles) -> bool:
    """The worker's gate: the node has the custom role ``hello``."""
    return ROLE in roles.custom


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
        with node.values.watch(ROLES) as roles:
            current = await roles.get()
            node.values.set(GREETING, _greeting(current, default))
            ctx.signal_healthy()
            ctx.log.info("greeting: %s", _greeting(current, default))
            async for current in roles:
                if has_hello_role(current):
                    node.values.set(GREETING, _greeting(current, default))

    async def hello_neighbours(ctx: RunContext) -> None:
        """Watches every node through the curator; see ``Neighbours``."""
        await on_each_connection(ctx, node.values, Neighbours(ctx, node))

    return [
        Worker("hello", hello, when=has_hello_role, reads=(ROLES,)),
        Worker(
            "hello_neighbours",
            hello_neighbours,
            when=has_hello_role,
            reads=(CURATOR_CONNECTION,),
        ),
    ]


class Neighbours:
    """One Watch of every node, on one connection to the leading curator.

    ``on_each_connection`` calls it with the current connection, and again (a new run of
    the worker, so state starts empty) on a new one: when the leader changes, or after
    the stream failed. The curator first sends every node (its backlog, ending with
    ``PROGRESS_LAST_BACKLOGGED``), then each change: nodes whole, removed ones as
    tombstones.
    """

    def __init__(self, ctx: RunContext, node: NodeContext) -> None:
        self.ctx = ctx
        self.node = node
        self.up: dict[str, bool] = {}
        self.published: tuple[str, ...] | None = None

    async def __call__(self, connection: CuratorConnection) -> None:
        curator = curator_pb2_grpc.CuratorStub(connection.channel)
        every_node = curator_pb2.WatchRequest.NodesInCluster()
        backlogged = False
        async for event in curator.Watch(curator_pb2.WatchRequest(nodes_in_cluster=every_node)):
            for changed in event.nodes:
                self.up[changed.id] = changed.state == common_pb2.NODE_STATE_UP
            for removed in event.node_tombstones:
                self.up.pop(removed.node_id, None)
            if event.progress == curator_pb2.WatchEvent.PROGRESS_LAST_BACKLOGGED:
                backlogged = True
                self.ctx.signal_healthy()
            if backlogged:
                self._publish(connection.node_id)

    def _publish(self, own_id: str) -> None:
        neighbours = tuple(sorted(n for n, up in self.up.items() if up and n != own_id))
        if neighbours != self.published:
            self.published = neighbours
            self.node.values.set(NEIGHBOURS, neighbours)
            self.ctx.log.info("neighbours: %s", ", ".join(neighbours) or "none")


def _greeting(roles: NodeRoles, default: str) -> str:
    return roles.custom.get(ROLE, {}).get("greeting", default)


@hookimpl
async def on_roles(roles: NodeRoles, node: NodeContext) -> None:
    """Log each role change (an async hook: the core awaits it)."""
    await anyio.lowlevel.checkpoint()
    node.log.info("roles are now: %s", ", ".join(roles.names()) or "none")
