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
    [plugins.controlplane]           the cluster's network   (node 1 only) it bootstraps the
      cluster_network                (clusternetwork)        cluster with it: one of its own
                                                             on this machine
    [plugins.clusternet]             the cluster's network   (--netns only) the mesh routes
      cluster_network                                        it: the same as the curator's

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

The file is edited as a ``tomlkit`` document, which keeps every comment, space and
quoting of the operator's as it was; each edit is then read back as the node will read it
(``tomllib``), and one that changes more than the setting is not made.

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
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import tomlkit
import tomlkit.exceptions
from tomlkit.items import InlineTable, Item, Table
from tomlkit.toml_document import TOMLDocument

from roleserve_core.errors import RoleserveError
from roleserve_core.settings import toml_literal

__all__ = [
    "CLUSTERNET_INTERFACE",
    "CLUSTERNET_NETWORK",
    "CLUSTERNET_OFF",
    "CONTROLPLANE_NETWORK",
    "HOSTS_FILE",
    "HOSTS_PATH",
    "LOOPBACK_MESH_OFF",
    "NodeConfigError",
    "NodeSetting",
    "configured",
    "configured_in",
    "operators_value",
    "setting_accepted",
    "with_setting",
    "without_setting",
]

ItemT = TypeVar("ItemT", bound=Item)

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
CONTROLPLANE_NETWORK = NodeSetting(
    "controlplane",
    "cluster_network",
    "cluster network",
    why="the cluster's own network on this machine, read when node 1 bootstraps",
)
"""``[plugins.controlplane] cluster_network`` of node 1, which bootstraps the cluster with
it: two clusters of one machine must not hand out the same node prefixes
(``clusternetwork``). Read at bootstrap only, so the other nodes do not get it."""
CLUSTERNET_NETWORK = NodeSetting(
    "clusternet",
    "cluster_network",
    "cluster network",
    why="the cluster's own network on this machine, routed through the mesh",
)
"""``[plugins.clusternet] cluster_network`` of each node of a ``--netns`` cluster: the mesh
routes the cluster network through its interface, which must be the network the curator
takes the nodes' prefixes from (its default is the controlplane's default)."""
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
    from roleserve_core.plugin_loader import ENTRY_POINT_GROUP, PluginSet, PluginState

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
        return configured_in(config.read_text(), setting)
    except (OSError, UnicodeDecodeError):
        return None


def configured_in(text: str, setting: NodeSetting) -> str | None:
    """The value of ``setting`` in ``text`` (a ``roleserve.toml``); None if it sets none
    (or is not TOML)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    value = setting.section(data).get(setting.key)
    return value if isinstance(value, str) else None


def operators_value(config: Path, setting: NodeSetting) -> str | None:
    """The value of ``setting`` in the node's ``roleserve.toml`` at ``config`` if the
    operator set it (a line ``up`` wrote is not theirs); None if not (or if the file
    cannot be read: the node says why when it starts)."""
    try:
        document = _parsed(config.read_text())
    except (OSError, UnicodeDecodeError):
        return None
    plugins = document.get("plugins") if document is not None else None
    section = plugins.get(setting.plugin) if isinstance(plugins, dict) else None
    if not isinstance(section, dict) or _ours(section, setting):
        return None
    value = section.get(setting.key)
    return str(value) if isinstance(value, str) else None


def with_setting(text: str, setting: NodeSetting, value: str, source: Path) -> str | None:
    """``text`` (a ``roleserve.toml``) with ``setting = "<value>"`` added, every other line
    as it was, or the line it added before with an older value given ``value``
    (``_refreshed``); None if it needs no change: it sets a value of its own (or this one),
    or is not valid TOML (left for the node to refuse).

    The line goes right under the section's header, or in a section of its own at the end,
    after a blank line.

    :param source: the file ``text`` came from, for the error.
    :raises NodeConfigError: if the line cannot be added (the section is an inline table,
        or made of dotted keys).
    """
    document = _parsed(text)
    if document is None or not isinstance(document.get("plugins", {}), dict):
        return None  # the node refuses a [plugins] that is no table, with its own message
    section = document.get("plugins", {}).get(setting.plugin)
    if isinstance(section, dict) and setting.key in section:
        return _refreshed(document, section, setting, value)
    if section is not None and not isinstance(section, dict):
        raise _cannot_add(setting, value, source)  # an array of tables
    expected = document.unwrap()
    expected.setdefault("plugins", {}).setdefault(setting.plugin, {})[setting.key] = value
    if section is None and not isinstance(document.get("plugins"), InlineTable):
        if not text.endswith("\n") and text:  # the header goes on a line of its own
            document = tomlkit.parse(f"{text}\n")
        header = tomlkit.table()
        header.append(setting.key, _marked(tomlkit.item(value), setting))
        plugins = tomlkit.table(is_super_table=True)
        plugins.append(setting.plugin, _marked(header, setting))
        document.append("plugins", plugins)
    elif isinstance(section, Table) and not section.is_super_table():
        line = _marked(tomlkit.item(value), setting)
        if section:  # under the header, above the operator's lines (tomlkit has no
            section.value._insert_at(0, setting.key, line)  # public insert: append is last)
        else:
            section.append(setting.key, line)
    merged = document.as_string()  # unchanged where it cannot go: refused just below
    if not _parses_to(merged, expected):
        raise _cannot_add(setting, value, source)
    return merged


def _cannot_add(setting: NodeSetting, value: str, source: Path) -> NodeConfigError:
    return NodeConfigError(
        f"{source}: cannot add the node's own {setting.what} to its "
        f"[plugins.{setting.plugin}] section; add the line {setting.key} = "
        f"{toml_literal(value)} to it yourself (or any value of your choice), then run "
        "`cluster up` again"
    )


def _refreshed(
    document: TOMLDocument, section: dict[str, Any], setting: NodeSetting, value: str
) -> str | None:
    """``document`` with the line ``with_setting`` added for ``setting`` (known by its mark)
    now saying ``value``; None if its value is that already, or the value is not on such a
    line (the operator's: theirs). A value ``up`` wrote can go stale: the loopback mesh's
    reason once ended mid-sentence, and each ``up`` since rewrites it."""
    if section[setting.key] == value or not _ours(section, setting):
        return None
    section[setting.key] = value  # the item keeps its place and its mark
    return document.as_string()


def without_setting(text: str, setting: NodeSetting) -> str | None:
    """``text`` without the lines ``with_setting`` added for ``setting`` (known by its
    mark): the value, and the section's header if it added that and nothing else is left
    under it, with the blank line before it. None if it holds none of them, or if taking
    them out would change anything else (an operator who wrote under the header keeps it
    all).
    """
    document = _parsed(text)
    plugins = document.get("plugins") if document is not None else None
    if document is None or not isinstance(plugins, dict):
        return None
    section = plugins.get(setting.plugin)
    if not isinstance(section, dict):
        return None
    header = isinstance(section, Table) and section.trivia.comment == setting.mark
    if not (header or _ours(section, setting)):
        return None
    expected = document.unwrap()
    if _ours(section, setting):
        del section[setting.key]
        del expected["plugins"][setting.plugin][setting.key]
    kept = document.as_string()
    if header and not section:
        del plugins[setting.plugin]
        del expected["plugins"][setting.plugin]
        if not expected["plugins"]:
            del expected["plugins"]
        kept = _without_blank_before(kept, document.as_string())
    return kept if _parses_to(kept, expected) else None


def _without_blank_before(before: str, after: str) -> str:
    """``after`` (``before`` with one stretch of lines taken out) without the blank line
    right before that stretch, which ``with_setting`` put before its section."""
    pairs = enumerate(zip(before, after, strict=False))  # after is the shorter
    cut = next((i for i, (a, b) in pairs if a != b), len(after))
    start = after.rfind("\n", 0, max(cut - 1, 0)) + 1  # of the line before the stretch
    return after[:start] + after[cut:] if cut and not after[start:cut].strip() else after


def _marked(item: ItemT, setting: NodeSetting) -> ItemT:
    """``item`` with ``setting``'s mark after it, two spaces away."""
    item.comment(setting.mark)
    item.trivia.comment_ws = "  "
    return item


def _ours(section: dict[str, Any], setting: NodeSetting) -> bool:
    """Whether the value of ``setting`` in ``section`` is on a line ``up`` wrote."""
    if not isinstance(section, Table) or setting.key not in section:
        return False
    item = section.item(setting.key)
    return isinstance(item, Item) and item.trivia.comment == setting.mark


def _parsed(text: str) -> TOMLDocument | None:
    """``text`` as a document that keeps every comment and space; None if not TOML."""
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.TOMLKitError:
        return None


def _parses_to(text: str, expected: dict[str, Any]) -> bool:
    """Whether ``text`` reads as ``expected`` (the one change, nothing else), as the node
    will read it: by ``tomllib``."""
    try:
        return tomllib.loads(text) == expected
    except tomllib.TOMLDecodeError:
        return False
