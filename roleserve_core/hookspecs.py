"""The hooks a roleserve plugin implements: the plugin author's reference.

A plugin is a module (or object) with functions marked ``@hookimpl``, found through the
entry-point group ``roleserve.plugins``. The core's own features are plugins on these same
hooks. Hooks are grouped by phase::

    load      roleserve_add_hookspecs   add hooks of your own for other plugins
              roleserve_settings        what this plugin accepts in roleserve.toml
    start     roleserve_values          keys this plugin owns
              roleserve_workers         workers, each gated on roles
    run       on_roles                  the node's roles changed
              on_curator_connection     the connection to the curator changed

The core calls each implementation on its own, never as one pluggy call, so that one
plugin's failure is recorded against that plugin and the others still run. Every docstring
below has one shape: purpose, when it is called, parameters, return value, async and
ordering rules, what happens when it raises, and how to implement it. ``docs/hooks.md`` is
generated from them (``python -m roleserve_core.docgen``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from roleserve_core.node import NodeContext, Worker
    from roleserve_core.registry import ValueKey
    from roleserve_core.roles import NodeRoles
    from roleserve_core.settings import Setting
    from roleserve_core.values import CuratorConnection

__all__ = ["HOOK_PHASES", "PROJECT", "hookimpl", "hookspec"]

PROJECT = "roleserve"
"""The pluggy project name; markers of other projects are ignored."""

hookspec = pluggy.HookspecMarker(PROJECT)
"""Marks a hook specification (for plugins that define hooks of their own)."""

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a hook implementation: ``@hookimpl def roleserve_workers(node): ...``."""


# -- load ---------------------------------------------------------------------------------


@hookspec
def roleserve_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Add hook specifications of this plugin's own, for other plugins to implement.

    Called once, when the plugin is registered, before any other hook of any plugin.

    :param plugin_manager: the node's pluggy plugin manager; call
        ``plugin_manager.add_hookspecs(module)`` with a module of ``@hookspec`` functions.
    :returns: nothing.

    Synchronous only. If it raises, the plugin is recorded as failed and unregistered.

    Implement it in a plugin that lets others contribute, as the metrics plugin lets any
    plugin contribute exporters. Implementations of hooks that another plugin defines should
    be marked ``@hookimpl(optionalhook=True)``, so they stay quiet when that plugin is absent.
    """


@hookspec
def roleserve_settings() -> list[Setting[Any]]:
    """Declare the settings this plugin accepts in its ``[plugins.<name>]`` section of
    ``roleserve.toml``.

    Called once, when the plugin is registered, right after ``roleserve_add_hookspecs``.
    The node checks every section of the file against the declarations before it starts
    anything: a key the plugin did not declare, a value of the wrong type, or one the
    setting does not allow, stops it with exit code 2 and one line naming the file, the
    section, the key and what is allowed. ``roleserve plugins`` lists the settings with
    their types, defaults, allowed values and docs.

    :returns: ``Setting(name, type, default, doc)`` records; ``type`` is ``str``, ``int``,
        ``float``, ``bool`` or ``list[str]``, and a ``None`` default makes the setting
        optional (unset unless the file gives it). The keywords ``minimum``, ``maximum``
        (inclusive), ``choices``, and ``predicate`` with its ``requirement`` ("an absolute
        path") say which values of the type are allowed. Return ``[]``, or leave the hook
        out, if the plugin takes no settings: its section, if any, must then be empty.

    Synchronous only. If it raises, or returns something other than ``Setting`` objects or
    two settings of one name, the plugin is marked failed and unloaded; the node starts
    without it (with ``--strict-plugins``, not at all).

    Implement it by returning module constants, and read each value in
    ``roleserve_workers`` with ``SETTING.read(node.config)``, which is typed: the core has
    checked the value and filled in the default::

        LEASE_TTL: Setting[int] = Setting("lease_ttl", int, 10, "Seconds a lease lasts.")

        @hookimpl
        def roleserve_settings() -> list[Setting[Any]]:
            return [LEASE_TTL]

    With more than a setting or two, declare each once as a field of a frozen
    ``PluginSettings`` dataclass (``setting``, ``port_setting``), return its
    ``declared()`` records here, and build the typed object in ``roleserve_workers`` with
    ``of(node.config)`` (see the plugin guide, "Settings").
    """
    raise NotImplementedError  # pragma: no cover - specification only


# -- start --------------------------------------------------------------------------------


@hookspec
def roleserve_values() -> list[ValueKey[Any]]:
    """Declare the node values this plugin owns.

    Called once per node start, for every plugin, before any worker is collected.

    :returns: the ``ValueKey`` constants this plugin owns; it alone may ``set`` them, and
        anyone may read them. Return ``[]`` if it owns none.

    Synchronous only. If it raises, or declares a key that another plugin already
    declared, this plugin is marked failed and unloaded; the node starts without it. Of two
    plugins declaring one key, the one that loads second is refused, with both named.

    Implement it by returning module constants: ``return [HELLO_GREETING]``. Define keys
    where their type lives, so readers import the key, not the owner. Name them
    ``<plugin>_<what>``, so that no other plugin's key can take the name: a key of another
    name loads, with a warning (but for the shared keys ``roleserve_core.values`` declares).
    """
    raise NotImplementedError  # pragma: no cover - specification only


@hookspec
def roleserve_workers(node: NodeContext) -> list[Worker]:
    """Name the workers this plugin contributes.

    Called once per node start, for every plugin, after all values are declared; also by
    ``roleserve plugins`` to list them, so it must not do I/O or start anything.

    :param node: this plugin's ``NodeContext`` (values, config section, data directory).
    :returns: ``Worker`` objects; each runs at ``root.role.<name>`` while its ``when``
        predicate holds for the node's roles. Return ``[]`` if the plugin has none.

    Synchronous only. If it raises a ``ConfigError`` (the plugin's own check across its
    settings), the node refuses to start, exit code 2, with that one line naming the file
    and the section, as for a setting its ``Setting`` does not allow; ``roleserve node
    config`` refuses the same file. If it raises anything else, the plugin is marked failed
    and none of its workers run. A worker whose name another plugin already uses is
    refused, with an error naming both plugins.

    Implement it by building ``Worker(name, run, when=..., reads=(...))`` values; gate on
    roles with a predicate such as ``lambda roles: roles.kubernetes_worker is not None``,
    and on a custom role with ``custom_role("name")``, which names the role so the node
    reports it as handled (``ctl roles set`` warns about custom roles no plugin handles).
    Name a heavy worker's code instead of importing it, ``Worker(name,
    lazy_runnable("pkg.worker_x:run", node, ...), when=..., doc="...")``: its module loads
    when the worker first starts, so a node without the role never carries it, and the
    module this hook is in stays light (every node, and ``roleserve plugins``, imports it).
    """
    raise NotImplementedError  # pragma: no cover - specification only


# -- run ----------------------------------------------------------------------------------


@hookspec
def on_roles(roles: NodeRoles, node: NodeContext) -> Awaitable[None] | None:
    """React to a change of the node's roles.

    Called whenever the ``roles`` value changes, at ``root.hooks.on_roles``. Calls are
    coalesced: if roles change again while implementations run, the next round gets only
    the newest roles.

    :param roles: the node's new roles.
    :param node: this plugin's ``NodeContext``.
    :returns: nothing, or an awaitable, which the core awaits.

    May be ``async``. Implementations run one at a time, in plugin order, each in
    isolation: one that raises or exceeds the hook timeout is logged at that DN, counted
    against its plugin (``roleserve plugins`` shows the count), and the others still run.

    Implement it for quick reactions (writing a file, logging). Long-running work belongs
    in a ``Worker`` gated with ``when=``, which the core starts and stops for you.
    """


@hookspec
def on_curator_connection(
    connection: CuratorConnection, node: NodeContext
) -> Awaitable[None] | None:
    """React to a change of the node's connection to the curator (the control plane).

    Called whenever the ``curator_connection`` value changes (enrolment finished, leader
    changed), at ``root.hooks.on_curator_connection``; coalesced like ``on_roles``.

    :param connection: the new connection.
    :param node: this plugin's ``NodeContext``.
    :returns: nothing, or an awaitable, which the core awaits.

    May be ``async``. Implementations run one at a time, in plugin order, each in
    isolation: one that raises or exceeds the hook timeout is logged at that DN and counted
    against its plugin, and the others still run.

    Implement it to refresh something that depends on who leads the cluster; workers that
    talk to the curator should rather watch ``curator_connection`` themselves.
    """


HOOK_PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("load", ("roleserve_add_hookspecs", "roleserve_settings")),
    ("start", ("roleserve_values", "roleserve_workers")),
    ("run", ("on_roles", "on_curator_connection")),
)
"""Every hook, grouped by the phase it is called in; the order of the reference manual."""
