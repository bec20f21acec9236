"""The built-in plugin core: the node's values; each of its workers is a plugin of its own.

Each is registered like any installed plugin, through the same hooks, so ``roleserve
plugins`` lists them one by one, ``ROLESERVE_DISABLE_PLUGINS`` can leave out the ones a node
can do without, and a test can put a plugin of its own in the place of one (as pytest's
``default_plugins`` are each a module of their own)::

    plugin       module / object                 contributes
    core         roleserve_core.builtin          roleserve_values: node_id, node_credentials,
                                                 bootstrap, roles, curator_connection,
                                                 network, handled_custom_roles,
                                                 cluster_nodes, revoked_credentials (declared
                                                 in ``values``)
    rolefetch    roleserve_core.builtin:ROLEFETCH      the worker rolefetch
    statuspush   roleserve_core.builtin:STATUSPUSH     the worker statuspush
    ...          (one ``CoreWorkerPlugin`` per worker of ``workers/``)

A worker plugin of the core acts for ``core`` (``BuiltinPlugin.context``): its worker gets
the core's ``NodeContext``, because the keys it writes (``roles``, ``cluster_nodes``,
``node_credentials``...) are the core's, and its files live in the core's data directory.
Which of them are essential, and why, is ``plugin_loader.BUILTIN_PLUGINS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roleserve_core.hookspecs import hookimpl
from roleserve_core.node import NodeContext, Worker
from roleserve_core.registry import ValueKey
from roleserve_core.values import (
    BOOTSTRAP,
    CLUSTER_NODES,
    CURATOR_CONNECTION,
    HANDLED_CUSTOM_ROLES,
    NETWORK,
    NODE_CREDENTIALS,
    NODE_ID,
    REVOKED_CREDENTIALS,
    ROLES,
)
from roleserve_core.workers.heartbeat import heartbeat_worker
from roleserve_core.workers.nodemgmt import nodemgmt_worker
from roleserve_core.workers.nodewatch import nodewatch_worker
from roleserve_core.workers.renewal import renewal_worker
from roleserve_core.workers.revocations import revocations_worker
from roleserve_core.workers.rolefetch import rolefetch_worker
from roleserve_core.workers.statuspush import statuspush_worker

__all__ = [
    "HEARTBEAT",
    "NODEMGMT",
    "NODEWATCH",
    "RENEWAL",
    "REVOCATIONS",
    "ROLEFETCH",
    "STATUSPUSH",
    "CoreWorkerPlugin",
    "roleserve_values",
]

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The core owns the node's identity and credentials, its bootstrap request, its roles,
    curator connection and network, which custom roles its plugins handle, the cluster's
    nodes, and the revoked user certificates."""
    return [
        NODE_ID,
        NODE_CREDENTIALS,
        BOOTSTRAP,
        ROLES,
        CURATOR_CONNECTION,
        NETWORK,
        HANDLED_CUSTOM_ROLES,
        CLUSTER_NODES,
        REVOKED_CREDENTIALS,
    ]


class CoreWorkerPlugin:
    """A built-in plugin that contributes one worker of the core.

    A small object rather than a module per worker: the seven would differ only in the
    worker they build, and the worker itself already has its file in ``workers/``.
    """

    ROLESERVE_PLUGIN_API = 1

    def __init__(self, build: Callable[[NodeContext], Worker], description: str) -> None:
        self._build = build
        self.__doc__ = description  # the first line ``roleserve plugins`` shows

    def __repr__(self) -> str:
        return f"CoreWorkerPlugin({self._build.__name__})"

    @hookimpl
    def roleserve_workers(self, node: NodeContext) -> list[Worker]:
        """The one worker, given the core's ``NodeContext``."""
        return [self._build(node)]


ROLEFETCH = CoreWorkerPlugin(
    rolefetch_worker, "Watches this node at the curator; sets and saves its roles."
)
STATUSPUSH = CoreWorkerPlugin(
    statuspush_worker, "Reports the node's address, version and local curator to the curator."
)
HEARTBEAT = CoreWorkerPlugin(heartbeat_worker, "Beats at the curator's heartbeat interval.")
NODEMGMT = CoreWorkerPlugin(
    nodemgmt_worker, "Serves the NodeManagement API, refusing revoked users."
)
NODEWATCH = CoreWorkerPlugin(
    nodewatch_worker, "Keeps cluster_nodes from one Watch of every node while it is read."
)
RENEWAL = CoreWorkerPlugin(
    renewal_worker, "Renews the node certificate after two thirds of its lifetime."
)
REVOCATIONS = CoreWorkerPlugin(
    revocations_worker, "Keeps revoked_credentials, for nodemgmt, from the leader's stream."
)
