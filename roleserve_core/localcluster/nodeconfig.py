"""Each local node's ``roleserve.toml``: the settings that must differ between the nodes of
one machine, each node's own.

    setting                          value                   why
    [plugins.hostsfile] path         "<node dir>/hosts"      nodes on one machine must not
                                                             fight over /etc/hosts
    [plugins.clusternet] interface   "<namespace prefix>wg<i>"  (--netns only) nodes in
                                                             namespaces still share
                                                             wireguard-go's socket directory
    [plugins.clusternet] off         LOOPBACK_MESH_OFF       (loopback only) the nodes share
                                                             one network namespace: the
                                                             mesh stays off, saying why

What ``up`` does before it starts node i, for each such setting::

    n<i>/roleserve.toml                    what up does
    ─────────────────────────────────────  ─────────────────────────────────────────
    absent                                 the cluster's config (if any), plus the line
    no such key in the plugin's section    the line added; every other line kept as is
    the line up added, an older value      its value replaced (a value up wrote can go
                                           stale); every other line kept as is
    a value of the operator's              left alone: the operator's choice wins
    not valid TOML                         left alone: the node refuses it, in one line
    a section it cannot add a line to (an  refused (NodeConfigError), naming the file
    inline table, dotted keys)             and the line to add by hand
    without the plugin: a line up added    taken out again, with the header it added

``up`` does this before every start, so a cluster made before this existed gets its
values at its next ``up``. The lines it adds end with the setting's ``mark``, so that it
can take them out again (``without_setting``) when the plugin is gone.

Decision: a value is written only when its plugin would accept it (``setting_accepted``):
installed, selected (``ROLESERVE_PLUGINS``, ``ROLESERVE_DISABLE_PLUGINS``), loaded, and
declaring the key. The nodes run with this process's interpreter and environment, so what
this process finds is what they find. A section of a plugin that is not installed makes a
node refuse its file (``resolve_plugin_config``: most likely a typo), a key the plugin does
not declare too, and a section of a blocked plugin costs a warning in the node's log at
every start; writing nothing in those cases keeps a node without the plugin starting,
quietly. A line ``up`` wrote while the plugin was there (a checkout of another branch, say)
is taken out again at the next ``up`` without it, with one line saying so; a value of the
operator's is theirs.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roleserve_core.errors import RoleserveError
from roleserve_core.settings import toml_literal

__all__ = [
    "CLUSTERNET_INTERFACE",
    "CLUSTERNET_OFF",
    "HOSTS_FILE",
    "HOSTS_PATH",
    "LOOPBACK_MESH_OFF",
    "NodeConfigError",
    "NodeSetting",
    "configured",
    "setting_accepted",
    "with_setting",
    "without_setting",
]

HOSTS_FILE = "hosts"
"""In each node's directory: the hosts file its hostsfile plugin keeps."""


@dataclass(frozen=True)
class NodeSetting:
    """One plugin setting that ``up`` gives each node a value of its own for."""

    plugin: str
    key: str
    what: str
    """What the value is, in ``up``'s messages and, unless ``why`` is given, in the
    comment after the line: ``this node's own <what>``."""
    why: str | None = None
    """The comment after the line, if not ``this node's own <what>``."""

    @property
    def mark(self) -> str:
        """After the line ``up`` writes, so that a reader of the file knows where it came
        from, and ``up`` knows which lines it may take out again."""
        why = self.why or f"this node's own {self.what}"
        return f"# roleserve cluster up: {why}"

    @property
    def header(self) -> re.Pattern[str]:
        """The section's header line, however it is quoted or spaced."""
        plugin = re.escape(self.plugin)
        return re.compile(
            rf"""^[ \t]*\[[ \t]*(plugins|"plugins")[ \t]*\.[ \t]*({plugin}|"{plugin}")[ \t]*\]"""
            r"[ \t]*(#[^\n]*)?\r?$",
            re.MULTILINE,
        )

    def section(self, data: dict[str, Any]) -> dict[str, Any]:
        """The plugin's section of parsed ``data``; empty if it has none."""
        plugins = data.get("plugins")
        section = plugins.get(self.plugin) if isinstance(plugins, dict) else None
        return section if isinstance(section, dict) else {}


HOSTS_PATH = NodeSetting("hostsfile", "path", "hosts file")
"""``[plugins.hostsfile] path``: nodes on one machine must not fight over /etc/hosts."""
CLUSTERNET_INTERFACE = NodeSetting("clusternet", "interface", "WireGuard interface")
"""``[plugins.clusternet] interface``: nodes in network namespaces of one machine still
share wireguard-go's socket directory, so each needs an interface name of its own."""
CLUSTERNET_OFF = NodeSetting(
    "clusternet",
    "off",
    "reason to keep the mesh off",
    why="a loopback cluster's nodes share one network",
)
"""``[plugins.clusternet] off``: the nodes of a loopback cluster share the machine's one
network namespace, where a mesh of theirs could only put interfaces and the cluster
network's route on the host itself. Its worker stays off and says why in ``ctl tree``
(a node without the plugin, as before, said nothing)."""
LOOPBACK_MESH_OFF = (
    "the nodes of a loopback cluster share one network namespace; "
    "`roleserve cluster up --netns` gives each node its own namespace and runs the mesh"
)
"""The value of ``CLUSTERNET_OFF`` on a loopback cluster: the clusternet worker's note."""


class NodeConfigError(RoleserveError):
    """A node's roleserve.toml that ``up`` cannot add a setting to."""


def setting_accepted(
    setting: NodeSetting, entry_points: Iterable[importlib.metadata.EntryPoint] | None = None
) -> bool:
    """Whether a node started by this process would accept ``setting`` (see the module
    docstring). Loads that plugin alone, not every plugin.

    :param entry_points: the installed ``roleserve.plugins`` entry points by default.
    """
    from roleserve_core.plugins import ENTRY_POINT_GROUP, PluginSet, PluginState

    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    found = [entry_point for entry_point in entry_points if entry_point.name == setting.plugin]
    if not found:
        return False
    plugins = PluginSet.load(entry_points=found[:1], builtins=())
    info = plugins.info(setting.plugin)
    return info.state is PluginState.LOADED and any(
        declared.name == setting.key for declared in info.settings
    )


def configured(config: Path, setting: NodeSetting) -> str | None:
    """The value of ``setting`` in the node's ``roleserve.toml`` at ``config``; None if it
    sets none (or cannot be read: the node says why when it starts)."""
    try:
        data = tomllib.loads(config.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    value = setting.section(data).get(setting.key)
    return value if isinstance(value, str) else None


def with_setting(text: str, setting: NodeSetting, value: str, source: Path) -> str | None:
    """``text`` (a ``roleserve.toml``) with ``setting = "<value>"`` added, every other line
    as it was, or the line it added before with an older value given ``value``
    (``_refreshed``); None if it needs no change: it sets a value of its own (or this one),
    or is not valid TOML (left for the node to refuse).

    :param source: the file ``text`` came from, for the error.
    :raises NodeConfigError: if the line cannot be added (the section is an inline table,
        or made of dotted keys).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    if not isinstance(data.get("plugins", {}), dict):
        return None  # the node refuses a [plugins] that is no table, with its own message
    if setting.key in setting.section(data):
        return _refreshed(text, data, setting, value)
    line = f"{setting.key} = {toml_literal(value)}  {setting.mark}\n"
    header = setting.header.search(text)
    if header is not None:  # the line goes right under the section's header
        head, tail = text[: header.end()], text[header.end() :].removeprefix("\n")
        merged = f"{head}\n{line}{tail}"
    else:  # a section of its own, after a blank line
        head = text if not text or text.endswith("\n") else f"{text}\n"
        blank = "\n" if head.strip() and not head.endswith("\n\n") else ""
        merged = f"{head}{blank}[plugins.{setting.plugin}]  {setting.mark}\n{line}"
    if not _only_added(data, merged, setting, value):
        raise NodeConfigError(
            f"{source}: cannot add the node's own {setting.what} to its "
            f"[plugins.{setting.plugin}] section; add the line {setting.key} = "
            f"{toml_literal(value)} to it yourself (or any value of your choice), then run "
            "`cluster up` again"
        )
    return merged


def _refreshed(text: str, data: dict[str, Any], setting: NodeSetting, value: str) -> str | None:
    """``text`` with the line ``with_setting`` added for ``setting`` (known by its mark) now
    saying ``value``; None if its value is that already, or the value is not on such a
    line (the operator's: theirs). A value ``up`` wrote can go stale: the loopback mesh's
    reason once ended mid-sentence, and each ``up`` since rewrites it."""
    if setting.section(data).get(setting.key) == value:
        return None
    lines = text.splitlines(keepends=True)
    ours = [
        i
        for i, line in enumerate(lines)
        if line.rstrip("\r\n").endswith(setting.mark) and not setting.header.match(line)
    ]
    if len(ours) != 1:
        return None
    ending = lines[ours[0]][len(lines[ours[0]].rstrip("\r\n")) :]
    lines[ours[0]] = f"{setting.key} = {toml_literal(value)}  {setting.mark}{ending}"
    refreshed = "".join(lines)
    expected = tomllib.loads(text)
    setting.section(expected)[setting.key] = value
    try:
        if tomllib.loads(refreshed) != expected:
            return None
    except tomllib.TOMLDecodeError:
        return None
    return refreshed


def without_setting(text: str, setting: NodeSetting) -> str | None:
    """``text`` without the lines ``with_setting`` added for ``setting`` (known by its
    mark): the value, and the section's header if it added that and nothing else is left
    under it. None if it holds none of them, or if taking them out would change anything
    else (an operator who wrote under the header keeps it all).
    """
    lines = text.splitlines(keepends=True)
    ours = [i for i, line in enumerate(lines) if line.rstrip("\r\n").endswith(setting.mark)]
    if not ours:
        return None
    try:
        expected = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    section = setting.section(expected)
    section.pop(setting.key, None)
    values = [i for i in ours if not setting.header.match(lines[i])]
    headers = [i for i in ours if setting.header.match(lines[i])]
    gone = set(values)
    if not section and headers:
        del expected["plugins"][setting.plugin]
        if not expected["plugins"]:
            del expected["plugins"]
        gone.update(headers)
        before = headers[0] - 1  # the blank line it put before the header
        if before >= 0 and not lines[before].strip():
            gone.add(before)
    kept = "".join(line for i, line in enumerate(lines) if i not in gone)
    try:
        if tomllib.loads(kept) != expected:
            return None
    except tomllib.TOMLDecodeError:
        return None
    return kept


def _only_added(before: dict[str, Any], merged: str, setting: NodeSetting, value: str) -> bool:
    """Whether ``merged`` parses to ``before`` with the setting added, and nothing else."""
    try:
        after = tomllib.loads(merged)
    except tomllib.TOMLDecodeError:
        return False
    plugins = after.get("plugins")
    section = plugins.get(setting.plugin) if isinstance(plugins, dict) else None
    if not isinstance(section, dict) or section.pop(setting.key, None) != value:
        return False
    if not section and setting.plugin not in before.get("plugins", {}):
        del after["plugins"][setting.plugin]
        if not after["plugins"] and "plugins" not in before:
            del after["plugins"]
    return after == before
