"""roleserve: a node agent that runs the services a node's cluster roles need.

This package is roleserve-core: the runtime every node runs, and the API plugin authors
write against. Plugins import what they need from here::

    from roleserve_core import NodeContext, RunContext, Worker, hookimpl

    @hookimpl
    def roleserve_workers(node: NodeContext) -> list[Worker]:
        return [Worker("backup", run_backup, when=lambda roles: "backup" in roles.custom)]

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

Everything is imported on first use (PEP 562), so that ``import roleserve_core`` (which
every ``roleserve`` command does, ``--version`` and ``--help`` among them) costs almost
nothing: grpc, protobuf, cryptography and pluggy load only when something needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roleserve_core.errors import RoleserveError
    from roleserve_core.event import Value, ValueWatch, Watcher
    from roleserve_core.hookspecs import hookimpl, hookspec
    from roleserve_core.node import NodeContext, Worker
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

    __version__: str

_HOMES = {
    "PLUGIN_API_VERSION": "roleserve_core.plugins",
    "ConsensusMember": "roleserve_core.roles",
    "ConsensusPeer": "roleserve_core.roles",
    "KubernetesController": "roleserve_core.roles",
    "KubernetesWorker": "roleserve_core.roles",
    "NodeContext": "roleserve_core.node",
    "NodeRoles": "roleserve_core.roles",
    "RoleserveError": "roleserve_core.errors",
    "RunContext": "roleserve_core.supervisor",
    "State": "roleserve_core.supervisor",
    "Supervisor": "roleserve_core.supervisor",
    "Value": "roleserve_core.event",
    "ValueKey": "roleserve_core.values",
    "ValueWatch": "roleserve_core.event",
    "Watcher": "roleserve_core.event",
    "Worker": "roleserve_core.node",
    "hookimpl": "roleserve_core.hookspecs",
    "hookspec": "roleserve_core.hookspecs",
}
"""Each exported name and the module it lives in."""

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
    "hookimpl",
    "hookspec",
]


def __getattr__(name: str) -> Any:
    """Import an exported name's module on first use, and keep the name here after."""
    if name == "__version__":
        from roleserve_core.version import core_version

        value: Any = core_version()
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        raise AttributeError(f"module 'roleserve_core' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
