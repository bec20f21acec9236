"""What a plugin gets from the node (``NodeContext``) and gives back (``Worker``).

::

    roleserve_workers(node: NodeContext) ──▶ [Worker("kubelet", run, when=is_worker), ...]
                                                       │
    core runtime: root.role.kubelet  ◀─────────────────┘  runs `run` while when(roles) holds

A ``Worker`` is a runnable plus the condition under which it runs. The core, not each
plugin, watches the roles and starts or cancels the worker as ``when(roles)`` changes:
Monogon's on-demand spawning, written once.

``when=custom_role("backup")`` is that condition for a third-party role, in a form the core
can read: an opaque predicate says nothing about which role it looks at, while this one
names it, so the node reports the custom roles its plugins handle and ``ctl roles set``
warns about a role no plugin on the node handles (a typo, or a plugin not installed).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from roleserve_core.errors import InvalidRunnableNameError, InvalidWorkerError
from roleserve_core.event import Value
from roleserve_core.logtree import LogTree
from roleserve_core.registry import PluginValues, ValueKey, ValueRegistry
from roleserve_core.roles import NodeRoles, check_custom_role_name
from roleserve_core.rundir import node_runtime_dir
from roleserve_core.stats import NodeStats
from roleserve_core.supervisor import NAME_PATTERN, LazyRunnable, Runnable, Supervisor
from roleserve_core.values import NODE_ID

__all__ = [
    "CustomRole",
    "HookImplementation",
    "NodeContext",
    "NodeIntrospection",
    "NodePlugins",
    "PluginRecord",
    "RolePredicate",
    "Worker",
    "custom_role",
]

RolePredicate = Callable[[NodeRoles], bool]
"""``when=``: a plain, fast, side-effect-free function of the node's roles."""


@dataclass(frozen=True, slots=True)
class CustomRole:
    """The predicate "the node holds the custom role ``name``", which also names the role.

    Built by ``custom_role(name)``; pass it as ``Worker(..., when=custom_role("backup"))``.
    """

    name: str
    """The role's name, without ``custom:``."""

    def __post_init__(self) -> None:
        check_custom_role_name(self.name)

    def __call__(self, roles: NodeRoles) -> bool:
        return self.name in roles.custom


def custom_role(name: str) -> CustomRole:
    """``when=`` for a worker that runs while the node holds the custom role ``name``.

    Prefer it to a lambda: the node reports the roles named this way as the ones its
    plugins handle, and ``roleserve ctl roles set`` warns about any other.

    :raises ValueError: if ``name`` cannot name a custom role.
    """
    return CustomRole(name)


@dataclass(frozen=True, slots=True)
class Worker:
    """One long-running job of a plugin, run by the core at ``root.role.<name>``.

    The core runs ``run`` only while ``when(roles)`` is true: it starts the worker when the
    predicate turns true and cancels it (with its whole subtree) when it turns false.
    ``when=None`` means always, even before the node knows its roles.

    With ``run=lazy_runnable("pkg.worker_x:run", ...)`` the worker's module is imported
    when the worker first starts, not when the hook module builds the ``Worker``: a node
    then loads only the code of the roles it holds (``roleserve_core.supervisor._lazy``).
    """

    name: str
    """Unique across all plugins of the node; ``^[a-z0-9_]{1,64}$``. Also its DN's last part."""
    run: Runnable
    """``async def run(ctx: RunContext) -> None``; a supervisor runnable."""
    when: RolePredicate | None = None
    """Run only while this holds for the node's roles; None for always."""
    reads: tuple[ValueKey[Any], ...] = ()
    """Keys the worker reads; reported at start-up if nobody owns one."""
    doc: str = ""
    """One line for ``roleserve plugins``; defaults to the first line of ``run.__doc__``.
    Required with a ``lazy_runnable`` run, whose function is not imported to read it."""

    @property
    def custom_role(self) -> str | None:
        """The custom role the worker is gated on, if ``when`` is a ``custom_role()``."""
        return self.when.name if isinstance(self.when, CustomRole) else None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise InvalidRunnableNameError(
                f"invalid worker name {self.name!r}; names must match ^[a-z0-9_]{{1,64}}$ "
                f"(the last part of its DN): call it {_worker_name(self.name)!r}"
            )
        if isinstance(self.run, LazyRunnable):
            if not self.doc:
                raise InvalidWorkerError(
                    f'worker {self.name!r}: add doc="one line" to its Worker(...), which '
                    "roleserve plugins shows: its run is a lazy_runnable, whose docstring "
                    "would be read only by importing its module"
                )
            lines = []
        else:
            # A blank docstring has no first line: (run.__doc__ or "").strip() may be empty.
            lines = (self.run.__doc__ or "").strip().splitlines()
        if not self.doc and lines:
            object.__setattr__(self, "doc", lines[0])
        object.__setattr__(self, "reads", tuple(self.reads))


def _worker_name(name: object) -> str:
    """A valid worker name close to ``name``: lower case, every other character ``_``."""
    fixed = re.sub(r"[^a-z0-9_]", "_", str(name).lower())[:64]
    return fixed or "worker"


class PluginRecord(Protocol):
    """What ``NodePlugins.infos`` says about one plugin (a ``plugin_loader.PluginInfo``)."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str | None: ...
    @property
    def state(self) -> str:
        """``loaded``, ``failed`` or ``blocked`` (a ``plugin_loader.PluginState``)."""

    @property
    def error(self) -> str | None:
        """Why it failed and what to do, one line; None unless failed."""

    @property
    def reason(self) -> str | None:
        """Why it is blocked; None unless blocked."""

    @property
    def hook_failures(self) -> Mapping[str, int]:
        """Hook name → how many calls of it raised or timed out."""


class HookImplementation(Protocol):
    """One plugin's implementation of one hook (a ``plugin_loader.HookCall``)."""

    @property
    def plugin(self) -> str: ...
    def __call__(self, **kwargs: Any) -> Any:
        """Call it with the hook's keyword arguments (each gets those it asks for)."""


class NodePlugins(Protocol):
    """The node's plugins as ``NodeIntrospection`` shows them: its ``plugin_loader.PluginSet``.

    A protocol rather than the class, because the class's module is above this one: it
    loads the hooks (``hookspecs``) whose arguments this module defines, so naming it here
    would tie the two into a circle (docs/architecture.md, "Layers").
    """

    def infos(self) -> Sequence[PluginRecord]:
        """Every plugin found, in load order."""

    def implementations(self, hook: str) -> Sequence[HookImplementation]:
        """The implementations of ``hook`` by loaded plugins, in load order."""

    def record_hook_failure(self, plugin: str, hook: str) -> None:
        """Count a failed call of ``hook`` against ``plugin``."""


@dataclass(frozen=True)
class NodeIntrospection:
    """The whole node, read-only but for restarts: every value, the log tree, and the
    supervisor once the node runs. For the node management service and for metrics; other
    plugins keep to their ``NodeContext.values``."""

    registry: ValueRegistry
    logtree: LogTree
    supervisor: Value[Supervisor] = field(default_factory=Value)
    """Set when the node's root runnable starts."""
    stats: NodeStats = field(default_factory=NodeStats)
    """Counters the core keeps for metrics: heartbeat round trips, gRPC calls served."""
    plugins: NodePlugins | None = None
    """The node's plugins (their states, and hooks that plugins define for each other): its
    ``plugin_loader.PluginSet``."""
    context: Callable[[str], NodeContext] | None = None
    """A plugin's ``NodeContext`` by its name, for calling a plugin's hook as the core
    does; None outside a ``NodeRuntime``."""


@dataclass(frozen=True)
class NodeContext:
    """A plugin's handle on the node it runs in; one per plugin, passed to every hook."""

    plugin: str
    """The plugin's name (its entry-point name)."""
    values: PluginValues
    """The node's values: read any, set those this plugin owns."""
    data_dir: Path
    """A directory of this plugin's own (``<node data dir>/plugins/<name>``), mode 0700. The
    node creates it before it starts any worker, so a worker may write there at once; hooks
    called while assembling (``roleserve_workers``, also run by ``roleserve plugins``) must
    not expect it, as listing plugins writes nothing."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """The plugin's section of ``roleserve.toml`` (``[plugins.<name>]``), read-only: every
    setting the plugin declares (``roleserve_settings``), checked, with the defaults filled
    in; read one with ``SETTING.read(node.config)``."""
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("roleserve.plugin"))
    """A logger for messages outside any runnable (hooks); workers use ``ctx.log``."""
    introspection: NodeIntrospection | None = None
    """The whole node (see ``NodeIntrospection``); None outside a ``NodeRuntime``."""

    @property
    def runtime_dir(self) -> Path:
        """A directory of this plugin's own for unix sockets (and other files that live
        only while the node runs): ``<node_runtime_dir(node data dir)>/<plugin>``, short
        whatever the data directory's length (``roleserve_core.rundir``). Put every socket
        here, never in ``data_dir``: a socket's path is limited to about 100 bytes. The node
        creates it (0700) with ``data_dir`` and removes it when it stops."""
        return node_runtime_dir(self.data_dir.parent.parent) / self.plugin

    @property
    def node_id(self) -> str | None:
        """The node's ID once it is known (after enrolment), else None."""
        watch = self.values.read(NODE_ID)
        return watch.get_nowait() if watch.statistics().is_set else None
