"""Finding, loading and calling plugins: one path for built-in and installed plugins.

::

    BUILTIN_PLUGINS ──────────────┐
    entry points                  ├─▶ select (ROLESERVE_PLUGINS / ROLESERVE_DISABLE_PLUGINS)
    "roleserve.plugins" ──────────┘     │
                                        ▼
                      import one at a time ─▶ check ROLESERVE_PLUGIN_API ─▶ pluggy register
                                        │ any failure: recorded on the PluginInfo, plugin skipped
                                        ▼ (strict mode: raised)
                                    PluginSet ──▶ implementations(hook): one call per plugin

Every problem is one line that names the plugin and its file, and says what to do: the
``ROLESERVE_PLUGIN_API`` line to add, the hook a misspelled one probably meant, the
signature a hook implementation should have.

The core's features are plugins too (``BUILTIN_PLUGINS``, the way pytest lists its own
modules), registered exactly like installed ones; only the essential ones refuse to be
disabled. Each entry point is loaded on its own instead of with pluggy's bulk loader, so a
plugin that fails to import, declares another plugin API version, or breaks a hook
signature is reported with its error and skipped, never fatal, unless ``strict``.

Every hook is called per plugin (``implementations``) rather than as one pluggy call, so
that the caller can isolate each plugin, give each its own ``NodeContext``, and count
failures against the plugin that raised. ``ROLESERVE_TRACE_HOOKS=1`` logs each call, its
arguments and its result at INFO on the ``roleserve.hooks`` logger.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import importlib.metadata
import inspect
import logging
import os
import traceback
import types
import warnings
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import pluggy

from roleserve_core import hookspecs
from roleserve_core._moved import PluginAPIDeprecationWarning
from roleserve_core.environment import DISABLE_PLUGINS_ENV, PLUGINS_ENV, TRACE_HOOKS_ENV
from roleserve_core.errors import (
    EssentialPluginError,
    PluginAPIVersionError,
    PluginError,
    PluginLoadError,
)
from roleserve_core.plugin_problems import (
    ACCEPTED_PLUGIN_APIS,
    PLUGIN_API_VERSION,
    api_problem,
    signature_problem,
    source_file,
    unknown_hook_message,
)
from roleserve_core.settings import Setting, check_declaration
from roleserve_core.text import cut
from roleserve_core.version import CORE_DISTRIBUTION, core_version

__all__ = [
    "ACCEPTED_PLUGIN_APIS",
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
    "BuiltinPlugin",
    "HookCall",
    "PluginInfo",
    "PluginSelection",
    "PluginSet",
    "PluginState",
]


ENTRY_POINT_GROUP = "roleserve.plugins"
"""Entry-point group of installed plugins: name = plugin name, value = hook module."""


log = logging.getLogger("roleserve.plugins")
trace_log = logging.getLogger("roleserve.hooks")


@dataclass(frozen=True, slots=True)
class BuiltinPlugin:
    """A plugin that ships inside roleserve-core."""

    name: str
    module: str
    """Where the plugin is, as an entry point's value: ``module`` or ``module:attribute``."""
    essential: str | None = None
    """Why the node cannot run without it; None if ``ROLESERVE_DISABLE_PLUGINS`` may name
    it. An essential plugin refuses to be disabled, with this reason."""
    context: str | None = None
    """The plugin whose ``NodeContext`` its hooks get, if not its own: the core's worker
    plugins act for ``core``, which owns the values they write."""

    def load(self) -> object:
        """Import the module, and take the attribute if one is named."""
        module, _, attribute = self.module.partition(":")
        loaded: object = importlib.import_module(module)
        return getattr(loaded, attribute) if attribute else loaded


def _core_worker(name: str, essential: str | None = None) -> BuiltinPlugin:
    return BuiltinPlugin(name, f"roleserve_core.builtin:{name.upper()}", essential, "core")


BUILTIN_PLUGINS: tuple[BuiltinPlugin, ...] = (
    BuiltinPlugin("core", "roleserve_core.builtin", essential="it owns the node's values"),
    _core_worker("rolefetch", essential="without it the node never learns its roles"),
    _core_worker(
        "statuspush", essential="without it the cluster does not learn the node's address"
    ),
    _core_worker("heartbeat", essential="without it the cluster takes the node for dead"),
    _core_worker("nodemgmt"),
    _core_worker("nodewatch", essential="the connection to the curator finds curators through it"),
    _core_worker(
        "renewal", essential="without it the node certificate expires and the node is cut off"
    ),
    _core_worker("revocations"),
)
"""The core's own plugins, registered first, in this order; their workers start in it.

Only ``nodemgmt`` (the NodeManagement API) and ``revocations`` (which only ``nodemgmt``
reads: without it, ``nodemgmt`` fails rather than serve revoked users) may be disabled."""


class PluginState(enum.StrEnum):
    """What happened to a plugin."""

    LOADED = "loaded"
    FAILED = "failed"
    BLOCKED = "blocked"


@dataclass(slots=True)
class PluginInfo:
    """Everything ``roleserve plugins`` reports about one plugin."""

    name: str
    distribution: str | None
    version: str | None
    module: str | None
    builtin: bool
    state: PluginState
    error: str | None = None
    """Why it failed and what to do, one line; None unless failed."""
    file: str | None = None
    """The file of its hook module (or class), named in its errors; None if unknown (it
    failed to import)."""
    traceback: str | None = None
    """The full traceback of the failure, if an exception caused it."""
    reason: str | None = None
    """Why it is blocked; None unless blocked."""
    description: str = ""
    """First line of the plugin module's docstring."""
    hooks: list[str] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    worker_docs: dict[str, str] = field(default_factory=dict)
    """Worker name → its one line (``Worker.doc``), for ``roleserve plugins``."""
    values: list[str] = field(default_factory=list)
    """Keys this plugin owns."""
    reads: list[str] = field(default_factory=list)
    """Keys this plugin's workers declare they read."""
    settings: list[Setting[Any]] = field(default_factory=list)
    """What it accepts in its ``[plugins.<name>]`` section (``roleserve_settings``)."""
    warnings: list[str] = field(default_factory=list)
    hook_failures: dict[str, int] = field(default_factory=dict)
    """Hook name → how many calls of it raised or timed out."""

    @property
    def where(self) -> str:
        """``plugin 'NAME' (FILE)``: how each of its errors and warnings begins."""
        return f"plugin {self.name!r}" + (f" ({self.file})" if self.file else "")

    def as_json(self) -> dict[str, Any]:
        """The JSON form printed by ``roleserve plugins --json``."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "state": str(self.state),
            "error": self.error,
            "hooks": list(self.hooks),
            "workers": list(self.workers),
            "worker_docs": dict(self.worker_docs),
            "values": list(self.values),
            "reads": list(self.reads),
            "settings": [_setting_json(setting) for setting in self.settings],
            "builtin": self.builtin,
            "module": self.module,
            "file": self.file,
            "description": self.description,
            "reason": self.reason,
            "warnings": list(self.warnings),
            "hook_failures": dict(self.hook_failures),
        }


def _setting_json(setting: Setting[Any]) -> dict[str, Any]:
    return {
        "name": setting.name,
        "type": setting.type_name,
        "default": setting.default,
        "optional": setting.optional,
        "allowed": setting.allowed if setting.allowed != setting.expected else None,
        "doc": setting.doc,
    }


@dataclass(frozen=True, slots=True)
class PluginSelection:
    """Which installed plugins to load.

    ``allow``: if not None, only these entry-point plugins load (built-ins always do).
    ``block``: these plugins do not load; naming an essential built-in is an error.
    """

    allow: frozenset[str] | None = None
    block: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSelection:
        """Read ``ROLESERVE_PLUGINS`` and ``ROLESERVE_DISABLE_PLUGINS`` (comma-separated)."""
        env = os.environ if environ is None else environ
        allow = env.get(PLUGINS_ENV)
        return cls(
            allow=None if allow is None else _names(allow),
            block=_names(env.get(DISABLE_PLUGINS_ENV, "")),
        )

    def why_blocked(self, name: str, *, builtin: bool) -> str | None:
        """The reason ``name`` does not load, or None if it loads."""
        if name in self.block:
            return f"named in {DISABLE_PLUGINS_ENV}"
        if self.allow is not None and not builtin and name not in self.allow:
            return f"not named in {PLUGINS_ENV}"
        return None


def _names(text: str) -> frozenset[str]:
    return frozenset(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class HookCall:
    """One plugin's implementation of one hook, callable with the hook's keyword arguments."""

    plugin: str
    hook: str
    function: Callable[..., Any]
    argnames: tuple[str, ...]
    trace: bool = False

    def __call__(self, **kwargs: Any) -> Any:
        """Call the implementation with the arguments it asks for (pluggy's rule)."""
        args = {name: kwargs[name] for name in self.argnames}
        if self.trace:
            trace_log.info("%s → %s(%s)", self.plugin, self.hook, _short(args))
        result = self.function(**args)
        if not self.trace:
            return result
        if inspect.isawaitable(result):
            return self._traced(result)
        trace_log.info("%s ← %s: %s", self.plugin, self.hook, _short(result))
        return result

    async def _traced(self, awaitable: Awaitable[Any]) -> Any:
        """Await an async implementation's result, then trace what it returned."""
        result = await awaitable
        trace_log.info("%s ← %s: %s", self.plugin, self.hook, _short(result))
        return result


def _short(obj: object, limit: int = 300) -> str:
    return cut(repr(obj), limit)


def _describe(plugin: object) -> str:
    doc = getattr(plugin, "__doc__", None) or ""
    lines = doc.strip().splitlines()
    return lines[0] if lines else ""


@contextlib.contextmanager
def _old_names_used() -> Iterator[list[str]]:
    """The messages of the ``PluginAPIDeprecationWarning``s raised in the block (a plugin's
    import of a name that moved), each once, in order: the plugin's warnings, which the
    node logs and ``roleserve plugins`` lists (Python shows a DeprecationWarning outside
    ``__main__`` to nobody). Any other warning goes on to the filters as before."""
    used: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginAPIDeprecationWarning)
        yield used
    for warning in caught:
        message = str(warning.message)
        if not issubclass(warning.category, PluginAPIDeprecationWarning):
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
        elif message not in used:
            used.append(message)


def log_old_names(logger: logging.Logger) -> None:
    """From now on, log each use of an old name (``PluginAPIDeprecationWarning``) at
    WARNING on ``logger``, once per place that uses it: a plugin that looks one up after
    its import (``keys.ROLES`` in a function), which ``_old_names_used`` does not see.
    Other warnings are shown as before."""
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, PluginAPIDeprecationWarning):
            logger.warning("%s:%d: %s", filename, lineno, message)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.filterwarnings("default", category=PluginAPIDeprecationWarning)


class PluginSet:
    """The plugins of one process: a pluggy manager, and what happened to every plugin."""

    def __init__(self, *, strict: bool = False, selection: PluginSelection | None = None) -> None:
        self.strict = strict
        self.selection = selection or PluginSelection()
        self.trace = os.environ.get(TRACE_HOOKS_ENV, "") not in ("", "0")
        self.manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)
        self._infos: dict[str, PluginInfo] = {}
        self._plugins: dict[str, object] = {}
        self._contexts: dict[str, str] = {}
        self.warnings: list[str] = []
        """Problems not tied to one plugin (e.g. an allow list naming a missing plugin)."""
        self.deprecations: list[str] = []
        """``plugin 'NAME' (FILE): MESSAGE`` of each old name a plugin imported (also in
        its ``PluginInfo.warnings``), for the node to log: ``roleserve plugins`` lists
        them under the plugin instead."""

    @classmethod
    def load(
        cls,
        *,
        strict: bool = False,
        selection: PluginSelection | None = None,
        entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
        builtins: Iterable[BuiltinPlugin] = BUILTIN_PLUGINS,
    ) -> PluginSet:
        """Load the built-in plugins, then every installed one, each on its own.

        :param selection: defaults to ``PluginSelection.from_env()``.
        :param entry_points: defaults to the installed ``roleserve.plugins`` entry points.
        :raises EssentialPluginError: if the block list names an essential plugin.
        :raises PluginLoadError: in strict mode, on the first plugin that fails or
            implements a hook that no plugin defines.
        """
        plugins = cls(strict=strict, selection=selection or PluginSelection.from_env())
        for builtin in builtins:
            plugins._load_builtin(builtin)
        if entry_points is None:
            entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        found = sorted(entry_points, key=lambda ep: ep.name)
        for entry_point in found:
            plugins._load_entry_point(entry_point)
        plugins._check_selection({ep.name for ep in found})
        plugins.check_unknown_hooks()
        return plugins

    # -- loading --------------------------------------------------------------------

    def _load_builtin(self, builtin: BuiltinPlugin) -> None:
        if builtin.essential and builtin.name in self.selection.block:
            raise EssentialPluginError(
                f"plugin {builtin.name!r} is essential and cannot be disabled: "
                f"{builtin.essential}; remove it from {DISABLE_PLUGINS_ENV}"
            )
        info = self._new_info(builtin.name, CORE_DISTRIBUTION, core_version(), builtin.module, True)
        if builtin.context is not None:
            self._contexts[builtin.name] = builtin.context
        if info is not None:
            self._import_and_register(info, builtin.load)

    def _load_entry_point(self, entry_point: importlib.metadata.EntryPoint) -> None:
        dist = entry_point.dist
        name = entry_point.name
        if name in self._infos:
            first = self._infos[name]
            self.warnings.append(
                f"plugin name {name!r} of {dist.name if dist else entry_point.value} is already "
                f"used by {first.distribution or first.module}; the second one is ignored"
            )
            return
        info = self._new_info(
            name,
            dist.name if dist else None,
            dist.version if dist else None,
            entry_point.value,
            False,
        )
        if info is not None:
            self._import_and_register(info, entry_point.load)

    def _new_info(
        self, name: str, dist: str | None, version: str | None, module: str, builtin: bool
    ) -> PluginInfo | None:
        """Record the plugin; None if the selection blocks it."""
        reason = self.selection.why_blocked(name, builtin=builtin)
        state = PluginState.BLOCKED if reason else PluginState.LOADED
        info = PluginInfo(name, dist, version, module, builtin, state, reason=reason)
        self._infos[name] = info
        return None if reason else info

    def _import_and_register(self, info: PluginInfo, load: Callable[[], Any]) -> None:
        try:
            with _old_names_used() as used:
                plugin = load()
        except Exception as exc:
            self._failed(info, f"import failed: {type(exc).__name__}: {exc}", exc)
            return
        self._register(info, plugin, check_api=True)
        for message in used:
            if message not in info.warnings:
                info.warnings.append(message)
                self.deprecations.append(f"{info.where}: {message}")

    def register(
        self,
        plugin: object,
        name: str,
        *,
        distribution: str | None = None,
        version: str | None = None,
    ) -> PluginInfo:
        """Register a plugin object directly (tests, embedding).

        The selection still applies. A module must declare ``ROLESERVE_PLUGIN_API`` as an
        installed plugin's must, since it is what an entry point would load; an object
        built in a test need not. Returns the plugin's info, whose ``state`` says whether it
        loaded.
        """
        if name in self._infos:
            raise PluginError(f"a plugin named {name!r} is already registered")
        module = getattr(plugin, "__name__", type(plugin).__qualname__)
        info = self._new_info(name, distribution, version, module, False)
        if info is None:
            return self._infos[name]
        self._register(info, plugin, check_api=isinstance(plugin, types.ModuleType))
        return info

    def _register(self, info: PluginInfo, plugin: object, *, check_api: bool) -> None:
        """Check the declared plugin API if asked to, then register with pluggy and call
        the plugin's load hooks; any failure is recorded on ``info``."""
        info.file = source_file(plugin)
        info.description = _describe(plugin)
        problem = api_problem(plugin, info.file) if check_api else None
        if problem is not None:
            self._failed(info, problem, None, PluginAPIVersionError)
            return
        try:
            self.manager.register(plugin, name=info.name)
        except pluggy.PluginValidationError as exc:
            problem = signature_problem(self.manager, plugin)
            self._failed(info, problem or f"invalid hook implementation: {exc}", exc)
            return
        except Exception as exc:
            self._failed(info, f"invalid hook implementation: {exc}", exc)
            return
        self._plugins[info.name] = plugin
        info.hooks = sorted(caller.name for caller in self.manager.get_hookcallers(plugin) or [])
        for call in self.implementations("roleserve_add_hookspecs", only=info.name):
            try:
                call(plugin_manager=self.manager)
            except Exception as exc:
                self.fail(info.name, exc, during="roleserve_add_hookspecs")
                return
        self._declare_settings(info)

    def _declare_settings(self, info: PluginInfo) -> None:
        """Record what the plugin accepts in roleserve.toml; a broken declaration fails the
        plugin, as a broken ``roleserve_values`` does."""
        for call in self.implementations("roleserve_settings", only=info.name):
            try:
                info.settings = check_declaration(call())
            except Exception as exc:
                self.fail(info.name, exc, during="roleserve_settings")

    def _failed(
        self,
        info: PluginInfo,
        message: str,
        exc: BaseException | None,
        raise_as: type[PluginError] = PluginLoadError,
    ) -> None:
        info.state = PluginState.FAILED
        # One line, as PluginInfo.error promises and the table shows it (pluggy's validation
        # errors span several lines); the traceback keeps the full text.
        message = "; ".join(line.strip() for line in message.splitlines() if line.strip())
        info.error = message
        info.traceback = "".join(traceback.format_exception(exc)) if exc is not None else None
        plugin = self._plugins.pop(info.name, None)
        if plugin is not None and self.manager.is_registered(plugin):
            self.manager.unregister(plugin)
        log.error("%s failed: %s", info.where, message)
        if self.strict:
            raise raise_as(f"{info.where} failed: {message}") from exc

    def fail(self, name: str, exc: BaseException | str, *, during: str) -> None:
        """Mark a loaded plugin failed (it raised in ``during``) and unregister it.

        :raises PluginLoadError: in strict mode.
        """
        if isinstance(exc, BaseException):
            message = f"{during} raised {type(exc).__name__}: {exc}"
            self._failed(self._infos[name], message, exc)
        else:
            self._failed(self._infos[name], f"{during}: {exc}", None)

    def _check_selection(self, found: set[str]) -> None:
        """Warn about selected names that match no plugin: a typo in the block list would
        otherwise load the plugin it meant to block without a word."""
        known = found | {b.name for b in BUILTIN_PLUGINS} | set(self._infos)
        selected = {
            "ROLESERVE_PLUGINS": self.selection.allow or frozenset(),
            "ROLESERVE_DISABLE_PLUGINS": self.selection.block,
        }
        for variable, names in selected.items():
            for missing in sorted(names - known):
                self.warnings.append(f"{variable} names {missing!r}, which is not installed")

    def check_unknown_hooks(self) -> None:
        """Warn about implementations of hooks nobody specified (likely a typo), naming the
        hook meant if one is close; in strict mode, raise instead.

        :raises PluginLoadError: in strict mode, on the first such implementation.
        """
        callers = sorted(vars(self.manager.hook).items())
        specified = [name for name, caller in callers if caller.spec is not None]
        for hook_name, caller in callers:
            if caller.spec is not None:
                continue
            for impl in caller.get_hookimpls():
                info = self._infos.get(impl.plugin_name)
                if impl.optionalhook or info is None:
                    continue
                message = unknown_hook_message(hook_name, specified)
                if self.strict:
                    raise PluginLoadError(f"{info.where}: {message}")
                if message not in info.warnings:
                    info.warnings.append(message)
                    log.warning("%s: %s", info.where, message)

    # -- using ------------------------------------------------------------------------

    def infos(self) -> list[PluginInfo]:
        """Every plugin seen, loaded or not, in load order."""
        return list(self._infos.values())

    def info(self, name: str) -> PluginInfo:
        """The info of plugin ``name``; KeyError if never seen."""
        return self._infos[name]

    def loaded(self) -> list[str]:
        """Names of the plugins that are loaded now, in load order."""
        return list(self._plugins)

    def context_name(self, plugin: str) -> str:
        """The plugin whose ``NodeContext`` ``plugin``'s hooks get: its own, but for the
        core's worker plugins (``BuiltinPlugin.context``)."""
        return self._contexts.get(plugin, plugin)

    def settings(self) -> dict[str, list[Setting[Any]]]:
        """Each loaded plugin's declared settings (``[]`` if it declares none), in load
        order; without the core's worker plugins, which act for ``core`` and so read its
        section (a ``[plugins.rolefetch]`` would be read by nobody)."""
        return {
            name: list(self._infos[name].settings)
            for name in self._plugins
            if self.context_name(name) == name
        }

    def implementations(self, hook: str, *, only: str | None = None) -> list[HookCall]:
        """The implementations of ``hook`` by loaded plugins, in load order.

        :param only: just this plugin's implementation, if it has one.
        """
        caller = getattr(self.manager.hook, hook, None)
        if caller is None:
            return []
        by_plugin = {impl.plugin_name: impl for impl in caller.get_hookimpls()}
        names = [only] if only is not None else list(self._plugins)
        return [
            HookCall(name, hook, impl.function, tuple(impl.argnames), self.trace)
            for name in names
            if (impl := by_plugin.get(name)) is not None
        ]

    def record_hook_failure(self, plugin: str, hook: str) -> None:
        """Count a failed call of ``hook`` against ``plugin``."""
        failures = self._infos[plugin].hook_failures
        failures[hook] = failures.get(hook, 0) + 1
