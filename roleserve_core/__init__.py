"""roleserve: a node agent that runs the services a node's cluster roles need.

This package is roleserve-core: the runtime every node runs, and the API plugin authors
write against. Plugins import what they need from here::

    from roleserve_core import NodeContext, RunContext, Worker, custom_role, hookimpl

    @hookimpl
    def roleserve_workers(node: NodeContext) -> list[Worker]:
        return [Worker("backup", run_backup, when=custom_role("backup"))]

The pieces, each a module of its own::

    event       Value / Watcher: latest-value cells, the only shared state
    values      ValueRegistry: named values, one owner each
    keys        the core's value keys and their types (also the built-in plugin "core")
    roles       NodeRoles: what the control plane assigned to the node
    supervisor  the supervision tree runnables live in
    logtree     per-DN ring buffers of log records
    hookspecs   the hooks plugins implement
    plugins     finding and loading plugins
    node        NodeContext and Worker, the plugin-facing objects
    runtime     plugins + values + workers assembled into one tree
    proto       the gRPC API (generated code committed)
    identity    keys, node IDs, the cluster CA, certificates, credentials
    rpc         gRPC with mutual TLS: authorization, peers, safe channels
    testing     fixtures and helpers for tests (a pytest plugin)
"""

from roleserve_core.errors import RoleserveError
from roleserve_core.event import Value, ValueWatch, Watcher
from roleserve_core.hookspecs import hookimpl, hookspec
from roleserve_core.node import NodeContext, Worker, custom_role
from roleserve_core.plugins import PLUGIN_API_VERSION
from roleserve_core.roles import (
    ConsensusMember,
    ConsensusPeer,
    KubernetesController,
    KubernetesWorker,
    NodeRoles,
)
from roleserve_core.supervisor import RunContext, State, Supervisor
from roleserve_core.values import ValueKey
from roleserve_core.version import core_version

__version__ = core_version()

__all__ = [
    "PLUGIN_API_VERSION",
    "ConsensusMember",
    "ConsensusPeer",
    "KubernetesController",
    "KubernetesWorker",
    "NodeContext",
    "NodeRoles",
    "RoleserveError",
    "RunContext",
    "State",
    "Supervisor",
    "Value",
    "ValueKey",
    "ValueWatch",
    "Watcher",
    "Worker",
    "__version__",
    "custom_role",
    "hookimpl",
    "hookspec",
]
