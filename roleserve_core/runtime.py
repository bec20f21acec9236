"""The node runtime: plugins, values and workers assembled into one supervision tree.

::

    PluginSet ──roleserve_values()──▶ ValueRegistry (one owner per key)
        │     ──roleserve_workers(node)──▶ Worker(name, run, when)
        ▼
    root
    ├── <service>                    the node process's own runnables (enrolment, connection)
    ├── role                         one group per worker, so workers fail alone
    │   ├── <worker>                 gated: runs while when(roles) holds
    │   └── ...
    └── hooks
        ├── on_roles                 calls every on_roles implementation per change
        └── on_curator_connection    the same for curator_connection

A gated worker waits, in state NEW with a note saying so, until ``when(roles)`` holds; then
its ``run`` starts in the same runnable, so its DN is ``root.role.<worker>`` and its
children hang below it. When the predicate turns false, the runnable restarts itself
(``RunContext.restart``): its subtree is cancelled and it is back to waiting, without the
backoff a failure would cost. A gated worker that signals done and returns stays HEALTHY,
not DONE: the gate keeps watching the roles, so that it can still stop the children the
worker left running when the roles change.

Building a ``NodeRuntime`` does no I/O, which is why ``roleserve plugins`` can build one
just to list the workers and values of every plugin. It checks the plugins' sections of
``roleserve.toml`` first (``resolve_plugin_config``, at the end of this module), so a bad
file is refused before any hook but the loading ones runs, and each ``NodeContext.config``
holds checked values with the defaults filled in. A ``ConfigError`` a plugin raises in
``roleserve_workers`` (its own check across settings) refuses the node the same way: a
plugin that refuses its configuration is the operator's to fix before the node runs, not a
plugin to leave out while the node reports itself up. Any other exception there fails only
that plugin.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from roleserve_core.errors import ConfigError, DuplicateValueKeyError
from roleserve_core.event import Watcher
from roleserve_core.logtree import LogTree
from roleserve_core.node import NodeContext, NodeIntrospection, RolePredicate, Worker
from roleserve_core.plugin_loader import PluginInfo, PluginSet, PluginState
from roleserve_core.registry import ValueKey, ValueRegistry, prefixed, unprefixed_key_warning
from roleserve_core.roles import NodeRoles
from roleserve_core.rundir import make_runtime_dir, node_runtime_dir, remove_runtime_dir
from roleserve_core.settings import check_sections, unknown_section
from roleserve_core.supervisor import RunContext, Runnable, Supervisor
from roleserve_core.values import (
    CURATOR_CONNECTION,
    HANDLED_CUSTOM_ROLES,
    MOVED_KEY_NAMES,
    ROLES,
    SHARED_KEYS,
)

__all__ = [
    "CORE_READER",
    "DEFAULT_HOOK_TIMEOUT",
    "NodeRuntime",
    "PluginConfig",
    "resolve_plugin_config",
]

DEFAULT_HOOK_TIMEOUT = 60.0
"""Seconds an ``on_*`` hook implementation may take before it counts as failed."""

CORE_READER = "core"
"""The name the runtime reads values under."""


class NodeRuntime:
    """One node's plugins, values and workers, and the root runnable that runs them."""

    def __init__(
        self,
        plugins: PluginSet,
        *,
        data_dir: Path,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        config_source: str = "roleserve.toml",
        logtree: LogTree | None = None,
        hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
    ) -> None:
        """Assemble the node (see the module docstring); nothing starts.

        :param config: the ``[plugins.NAME]`` sections of ``roleserve.toml``, unchecked.
        :param config_source: the file they came from, named in errors and warnings.
        :raises ConfigError: if a section does not match what its plugin declared, or a
            plugin's ``roleserve_workers`` refuses its settings.
        """
        self.plugins = plugins
        self.config_source = config_source
        self.data_dir = data_dir
        self.logtree = logtree or LogTree()
        self.log = self.logtree.logger("runtime")
        resolved = resolve_plugin_config(plugins, config or {}, config_source)
        self.config: Mapping[str, Mapping[str, Any]] = resolved.sections
        """Each loaded plugin's checked settings, defaults filled in."""
        for warning in resolved.warnings:
            self.log.warning("%s", warning)
        self.hook_timeout = hook_timeout
        self.services: dict[str, Runnable] = {}
        """Runnables of the node process itself, at ``root.<name>``, beside the workers
        (``add_service``)."""
        self.registry = ValueRegistry()
        self.introspection = NodeIntrospection(
            self.registry, self.logtree, plugins=plugins, context=self.context
        )
        self.contexts: dict[str, NodeContext] = {}
        self.workers: dict[str, tuple[str, Worker]] = {}
        """Worker name → (plugin, worker), in start order."""
        self._declare_values()
        self._collect_workers()
        self._report_unowned_reads()
        self._announce_custom_roles()

    # -- assembly ----------------------------------------------------------------------

    def context(self, plugin: str) -> NodeContext:
        """The ``NodeContext`` of ``plugin`` (created on first use); a worker plugin of the
        core gets the core's (``BuiltinPlugin.context``)."""
        plugin = self.plugins.context_name(plugin)
        context = self.contexts.get(plugin)
        if context is None:
            section = self.config.get(plugin, {})
            context = NodeContext(
                plugin=plugin,
                values=self.registry.scoped(plugin),
                data_dir=self.data_dir / "plugins" / plugin,
                config=section,
                log=self.logtree.logger(f"plugin.{plugin}"),
                introspection=self.introspection,
            )
            self.contexts[plugin] = context
        return context

    def _declare_values(self) -> None:
        for call in self.plugins.implementations("roleserve_values"):
            try:
                keys = list(call())
                self._check_keys(call.plugin, keys)
            except Exception as exc:
                self.plugins.fail(call.plugin, exc, during="roleserve_values")
                continue
            info = self.plugins.info(call.plugin)
            for key in keys:
                self.registry.declare(key, call.plugin)
                if not info.builtin and key not in SHARED_KEYS and key.name not in MOVED_KEY_NAMES:
                    self._warn(call.plugin, unprefixed_key_warning(call.plugin, key))
            info.values = [key.name for key in keys]

    def _check_keys(self, plugin: str, keys: list[Any]) -> None:
        """Validate a whole declaration first, so a refused plugin declares nothing. A key
        owned twice is blamed on the plugin that loads second, whichever it is: plugins
        declare in load order, and the first declaration stands."""
        names: set[str] = set()
        for key in keys:
            if not isinstance(key, ValueKey):
                raise TypeError(f"roleserve_values must return ValueKey objects, got {key!r}")
            if key.name in names:
                raise DuplicateValueKeyError(f"value {key.name!r} is declared twice")
            names.add(key.name)
            if key in self.registry:
                owner = self.registry.owner_of(key)
                raise DuplicateValueKeyError(
                    f"value {key.name!r} is already owned by plugin {owner!r}, which loaded "
                    f"first; a value has exactly one owner: name this plugin's key "
                    f"{prefixed(plugin, key.name)!r}, or read the one {owner!r} owns"
                )

    def _collect_workers(self) -> None:
        for call in self.plugins.implementations("roleserve_workers"):
            try:
                workers = list(call(node=self.context(call.plugin)))
                self._check_workers(workers)
            except ConfigError as exc:
                raise ConfigError(self._refusal(call.plugin, exc)) from None
            except Exception as exc:
                self._forget_plugin_values(call.plugin)
                self.plugins.fail(call.plugin, exc, during="roleserve_workers")
                continue
            info = self.plugins.info(call.plugin)
            for worker in workers:
                self.workers[worker.name] = (call.plugin, worker)
                self.registry.declare_reads(call.plugin, worker.reads)
            info.workers = [worker.name for worker in workers]
            info.worker_docs = {worker.name: worker.doc for worker in workers}
            info.reads = sorted({key.name for worker in workers for key in worker.reads})

    def _refusal(self, plugin: str, exc: ConfigError) -> str:
        """A plugin's refusal of its settings, as the core's: the file, then the section
        (which plugins' messages usually begin with already)."""
        message = str(exc)
        section = f"[plugins.{self.plugins.context_name(plugin)}]"
        if not message.startswith(section):
            message = f"{section} {message}"
        return f"{self.config_source}: {message}"

    def _check_workers(self, workers: list[Any]) -> None:
        names: set[str] = set()
        for worker in workers:
            if not isinstance(worker, Worker):
                raise TypeError(f"roleserve_workers must return Worker objects, got {worker!r}")
            if worker.name in names:
                raise ValueError(f"two workers are named {worker.name!r}")
            names.add(worker.name)
            if worker.name in self.workers:
                owner = self.workers[worker.name][0]
                raise ValueError(f"worker name {worker.name!r} is already used by {owner!r}")

    def _forget_plugin_values(self, plugin: str) -> None:
        """Drop the keys of a plugin that failed after declaring them."""
        self.registry.forget_owner(plugin)
        self.plugins.info(plugin).values = []

    def _report_unowned_reads(self) -> None:
        for reader, name in self.registry.unowned_reads():
            self._warn(
                reader,
                f"its workers read value {name!r}, which no loaded plugin owns; "
                "they will fail when they read it",
            )

    def _warn(self, plugin: str, message: str | None) -> None:
        """Record a warning against ``plugin`` (once) and log it; None is no warning."""
        if message is None:
            return
        warnings = self.plugins.info(plugin).warnings
        if message not in warnings:  # a second runtime of the same plugins
            warnings.append(message)
        self.log.warning("plugin %r: %s", plugin, message)

    def _announce_custom_roles(self) -> None:
        """Set ``handled_custom_roles`` from the workers gated with ``custom_role()``, for
        statuspush to report (unless the core's keys are not loaded, as in some tests)."""
        if HANDLED_CUSTOM_ROLES not in self.registry:
            return
        names = {worker.custom_role for _plugin, worker in self.workers.values()}
        handled = tuple(sorted(name for name in names if name is not None))
        owner = self.registry.owner_of(HANDLED_CUSTOM_ROLES)  # "core", or a test's name for it
        self.registry.scoped(owner).set(HANDLED_CUSTOM_ROLES, handled)

    @property
    def runtime_dir(self) -> Path:
        """The node's runtime directory (``roleserve_core.rundir``): its plugins' sockets."""
        return node_runtime_dir(self.data_dir)

    def _make_data_dirs(self) -> None:
        """Create ``NodeContext.data_dir`` and ``NodeContext.runtime_dir`` of every plugin
        (mode 0700): a worker may write or bind there from its first line. Here, not while
        assembling, so that ``roleserve plugins`` writes nothing.

        :raises RuntimeDirectoryError: the runtime directory cannot be made, or is not ours.
        """
        for plugin in self.plugins.loaded():
            context = self.context(plugin)
            context.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            make_runtime_dir(context.runtime_dir)

    def remove_runtime_dir(self) -> None:
        """Remove the node's runtime directory, once everything the node ran has stopped
        (the node process after its supervisor, the test kit after a test); kept whole
        while something is mounted in it (``rundir.remove_runtime_dir``)."""
        kept = remove_runtime_dir(self.runtime_dir)
        if kept:
            self.log.warning(
                "kept the runtime directory %s: %s is still mounted there (a worker could not"
                " unmount it; the next start of the node finds it)",
                self.runtime_dir,
                ", ".join(map(str, kept)),
            )

    def add_service(self, name: str, runnable: Runnable) -> None:
        """Run ``runnable`` at ``root.<name>``, started before the workers; the node
        process adds its enrolment and curator connection this way, before it starts."""
        if name in ("role", "hooks") or name in self.services:
            raise ValueError(f"root.{name} is taken")
        self.services[name] = runnable

    # -- running ---------------------------------------------------------------------

    def supervisor(self, **options: Any) -> Supervisor:
        """A ``Supervisor`` running this node, sharing this runtime's log tree."""
        return Supervisor(self.root, logtree=self.logtree, **options)

    async def root(self, ctx: RunContext) -> None:
        """The root runnable: the role runtime and the hook dispatchers, started once every
        plugin's data directory exists."""
        self.introspection.supervisor.set(ctx.supervisor)
        await anyio.to_thread.run_sync(self._make_data_dirs)
        for name, service in self.services.items():
            ctx.run(name, service)
        ctx.run("role", self._run_role)
        ctx.run("hooks", self._run_hooks)
        ctx.signal_healthy()
        await anyio.sleep_forever()

    async def _run_role(self, ctx: RunContext) -> None:
        for name, (_plugin, worker) in self.workers.items():
            ctx.run(name, self._gated(worker))
        ctx.signal_healthy()
        await anyio.sleep_forever()

    def _reading(self, worker: Worker) -> Runnable:
        """``worker.run``, marking the worker an active reader of the keys it declares
        while it runs (``ValueRegistry.reading``): what keeps ``cluster_nodes`` alive."""
        if not worker.reads:
            return worker.run
        run, reads, registry = worker.run, worker.reads, self.registry

        async def reading(ctx: RunContext) -> None:
            with registry.reading(worker.name, reads):
                await run(ctx)

        reading.__doc__ = run.__doc__
        return reading

    def _gated(self, worker: Worker) -> Runnable:
        run = self._reading(worker)
        if worker.when is None:
            return run
        when = worker.when
        roles = self.registry.read(ROLES, CORE_READER)

        async def gated(ctx: RunContext) -> None:
            with roles.watch() as watcher:
                ctx.set_note("waiting for its roles")
                await watcher.get(filter=when)
                ctx.set_note("")
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_restart_when_false, ctx, watcher, when)
                    await run(ctx)
                    if not ctx.done:
                        tasks.cancel_scope.cancel()

        gated.__doc__ = run.__doc__
        return gated

    async def _run_hooks(self, ctx: RunContext) -> None:
        ctx.run("on_roles", self._dispatcher("on_roles", ROLES, "roles"))
        ctx.run(
            "on_curator_connection",
            self._dispatcher("on_curator_connection", CURATOR_CONNECTION, "connection"),
        )
        ctx.signal_healthy()
        await anyio.sleep_forever()

    def _dispatcher(self, hook: str, key: ValueKey[Any], argument: str) -> Runnable:
        source = self.registry.read(key, CORE_READER)

        async def dispatch(ctx: RunContext) -> None:
            with source.watch() as watcher:
                ctx.signal_healthy()
                async for value in watcher:
                    await self.call_each(hook, ctx.log, **{argument: value})

        return dispatch

    async def call_each(self, hook: str, log: logging.Logger, **kwargs: Any) -> None:
        """Call every implementation of ``hook``, one at a time, each in isolation.

        Each gets its own plugin's ``NodeContext`` as ``node``. One that raises or takes
        longer than ``hook_timeout`` is logged and counted; the others still run.
        """
        for call in self.plugins.implementations(hook):
            try:
                with anyio.fail_after(self.hook_timeout) as scope:
                    result = call(node=self.context(call.plugin), **kwargs)
                    if inspect.isawaitable(result):
                        await result
            except Exception as exc:
                self.plugins.record_hook_failure(call.plugin, hook)
                if isinstance(exc, TimeoutError) and scope.cancelled_caught:
                    # Our deadline, not an error of the plugin's: its TimeoutError says
                    # nothing, so name the limit instead.
                    log.error(
                        "plugin %r: %s did not finish within %ss",
                        call.plugin,
                        hook,
                        self.hook_timeout,
                    )
                    continue
                log.error(
                    "plugin %r: %s raised %s: %s",
                    call.plugin,
                    hook,
                    type(exc).__name__,
                    exc,
                    exc_info=exc,
                )


async def _restart_when_false(
    ctx: RunContext, roles: Watcher[NodeRoles], when: RolePredicate
) -> None:
    """Restart the gated runnable once its predicate no longer holds."""
    await roles.get(filter=_negate(when))
    ctx.log.info("its roles no longer hold; stopping until they do again")
    ctx.restart()


def _negate(predicate: Callable[[NodeRoles], bool]) -> Callable[[NodeRoles], bool]:
    return lambda roles: not predicate(roles)


# -- the plugins' sections of roleserve.toml -------------------------------------------
# Here rather than in settings.py, which checks a section against its Setting records and
# knows no PluginSet: plugin_loader.py records those records, so settings.py sits below it.


@dataclass(frozen=True)
class PluginConfig:
    """The plugin sections of a node's configuration, checked."""

    sections: Mapping[str, Mapping[str, Any]]
    """Every loaded plugin's settings (read-only), each filled in with its defaults."""
    warnings: tuple[str, ...] = ()
    """Sections that were not checked, and why (their plugin is blocked or failed)."""


def resolve_plugin_config(
    plugins: PluginSet, sections: Mapping[str, Mapping[str, Any]], source: str
) -> PluginConfig:
    """Check every ``[plugins.NAME]`` section against what its plugin declared.

    A section of a loaded plugin must set only its settings, each of its type. A section of
    a plugin absent on purpose (blocked by the selection, or named in the block list though
    not installed) or of one that failed to load is left unchecked, with a warning. Any
    other section names no plugin and is refused: most likely a typo.

    :param source: the file the sections came from, for messages.
    :raises ConfigError: one line naming ``source``, the section, the key and what to do.
    """
    # The core's worker plugins act for core and read its section: none of their own.
    infos = {
        info.name: info for info in plugins.infos() if plugins.context_name(info.name) == info.name
    }
    warnings = [
        warning
        for name in sections
        if (warning := _why_unchecked(plugins, infos, name, source)) is not None
    ]
    return PluginConfig(check_sections(source, sections, plugins.settings()), tuple(warnings))


def _why_unchecked(
    plugins: PluginSet, infos: Mapping[str, PluginInfo], name: str, source: str
) -> str | None:
    """None for the section of a loaded plugin (to be checked); a warning for one of a
    plugin absent on purpose or broken.

    :raises ConfigError: for a section of no plugin this node knows of.
    """
    info = infos.get(name)
    where = f"{source}: [plugins.{name}]"
    if info is None and name in plugins.selection.block:
        return (
            f"{where} is ignored: plugin {name!r} is named in ROLESERVE_DISABLE_PLUGINS "
            "(and not installed)"
        )
    if info is None:
        raise ConfigError(unknown_section(source, name, sorted(infos)))
    if info.state is PluginState.BLOCKED:
        return f"{where} is ignored: plugin {name!r} is {info.reason}"
    if info.state is PluginState.FAILED:
        return f"{where} is not checked: plugin {name!r} failed to load"
    return None
