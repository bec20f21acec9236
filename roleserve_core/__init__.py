"""roleserve: a node agent that runs the services a node's cluster roles need.

This package is roleserve-core: the runtime every node runs, and the API plugin authors
write against. Plugins import everything they need from here (the list, by topic, is
``__init__.pyi``; tests/test_exports.py keeps the repository's plugins to it)::

    from roleserve_core import NodeContext, RunContext, Worker, hookimpl

    @hookimpl
    def roleserve_workers(node: NodeContext) -> list[Worker]:
        return [Worker("backup", run_backup, when=lambda roles: "backup" in roles.custom)]

The pieces, each a module of its own::

    event       Value / Watcher: latest-value cells, the only shared state
    registry    ValueRegistry: named values, one owner each
    values      the core's value keys and their types (also the built-in plugin "core")
    keys        plugin API 1's name of values, kept while the core accepts API 1 (_moved)
    roles       NodeRoles: what the control plane assigned to the node
    supervisor  the supervision tree runnables live in
    logtree     per-DN ring buffers of log records
    hookspecs   the hooks plugins implement
    plugin_loader  finding, loading and calling plugins (PluginSet)
    plugin_problems  what is wrong with a plugin, in one line that ends in the fix
    node        NodeContext and Worker, the plugin-facing objects
    settings    Setting: what a plugin accepts in roleserve.toml, checked at start
    settingsclass  PluginSettings: a plugin's settings as one frozen dataclass, from its fields
    runtime     plugins + values + workers assembled into one tree
    proto       the gRPC API (generated code committed)
    identity    keys, node IDs, the cluster CA, certificates, credentials
    rpc         gRPC with mutual TLS: authorization, peers, safe channels
    process     the runner of programs (etcd, exporters, ...): death with the node, leftovers
    rundir      a node's runtime directory: its unix sockets, short whatever its data directory
    environment every environment variable roleserve reads
    ctl_extension, cluster_extension
                what a plugin's own `roleserve ctl` sub-command and its part of
                `roleserve cluster up|status` are written with (entry points)
    service_nodemanagement
                the NodeManagement service, which the worker workers/nodemgmt serves
    testing     fixtures and helpers for tests (its pytest plugin: testing.pytest_plugin)

Everything is imported on first use (PEP 562, through ``lazy_loader``; the names and their
modules are listed once, in ``__init__.pyi``, which type checkers read too), so that
``import roleserve_core`` (which every ``roleserve`` command does, ``--version`` and
``--help`` among them) costs almost nothing: grpc, protobuf, cryptography and pluggy load
only when something needs them.
"""

from __future__ import annotations

from roleserve_core._moved import TO_PLUGINS, moved_names

# typing only for the annotations: the ``roleserve`` command imports this module at start,
# and importing ``typing`` costs it a tenth of the interpreter's start (benchmarks/cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_attached: tuple[Any, Any, list[str]] | None = None


def _stub() -> tuple[Any, Any, list[str]]:
    """``lazy_loader``'s reading of ``__init__.pyi``, made on the first look-up of an
    exported name (or of ``__all__``), not at import: ``lazy_loader`` and the parse of the
    stub (``ast``, ``inspect``) cost ``roleserve --version`` a third of the interpreter's
    start, and the ``roleserve`` command imports this package first."""
    global _attached
    if _attached is None:
        import lazy_loader

        _attached = lazy_loader.attach_stub(__name__, __file__)
    return _attached


def _all() -> list[str]:
    return sorted([*_stub()[2], "__version__"])


def _exported(name: str) -> Any:
    """An exported name, imported on first use (and kept here after)."""
    if name == "__all__":
        globals()[name] = names = _all()
        return names
    if name != "__version__":
        return _stub()[0](name)
    from roleserve_core.version import core_version

    globals()[name] = version = core_version()
    return version


# A name that moved to the plugin owning it (_moved.TO_PLUGINS) answers with a warning
# naming its place there; every other name is _exported's.
__getattr__ = moved_names(__name__, TO_PLUGINS, api=1, otherwise=_exported)


def __dir__() -> list[str]:
    return sorted({*globals(), *_all()})
