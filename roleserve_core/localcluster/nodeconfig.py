"""Each local node's ``roleserve.toml``: its own hosts file, in its own directory.

The hostsfile plugin keeps a block of ``<address> <node-id>`` lines in a hosts file,
``/etc/hosts`` unless ``[plugins.hostsfile] path`` says otherwise. The nodes of a local
cluster share one machine, so each gets ``path = "<its directory>/hosts"`` instead of
fighting over ``/etc/hosts``::

    n<i>/roleserve.toml                    what up does before it starts node i
    ─────────────────────────────────────  ─────────────────────────────────────────
    absent                                 the cluster's config (if any), plus the path
    no [plugins.hostsfile] path            the path added; every other line kept as is
    a path of the operator's               left alone: the operator's choice wins
    not valid TOML                         left alone: the node refuses it, in one line
    a path it cannot add as text (an       refused (NodeConfigError), naming the file
    inline table, dotted keys)             and the line to add by hand
    without the plugin: a path up added    taken out again, with the header it added

``up`` does this before every start, so a cluster made before this existed gets its paths
at its next ``up``. The lines it adds end with ``MARK``, so that it can take them out again
(``without_hosts_path``) when the plugin is gone.

Decision: the path is written only when the hostsfile plugin would accept it
(``hosts_path_accepted``): installed, selected (``ROLESERVE_PLUGINS``,
``ROLESERVE_DISABLE_PLUGINS``), loaded, and declaring a ``path`` setting. The nodes run
with this process's interpreter and environment, so what this process finds is what they
find. A section of a plugin that is not installed makes a node refuse its file
(``resolve_plugin_config``: most likely a typo), a key the plugin does not declare too, and
a section of a blocked plugin costs a warning in the node's log at every start; writing
nothing in those cases keeps a node without the plugin starting, quietly. A path ``up``
wrote while the plugin was there (a checkout of another branch, say) is taken out again
at the next ``up`` without it, with one line saying so; a path of the operator's is theirs.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from roleserve_core.errors import RoleserveError
from roleserve_core.settings import toml_literal

__all__ = [
    "HOSTSFILE_PLUGIN",
    "HOSTS_FILE",
    "configured_hosts_file",
    "hosts_path_accepted",
    "with_hosts_path",
    "without_hosts_path",
]

HOSTS_FILE = "hosts"
"""In each node's directory: the hosts file its hostsfile plugin keeps."""
HOSTSFILE_PLUGIN = "hostsfile"
PATH_SETTING = "path"
MARK = "# roleserve cluster up: this node's own hosts file"
"""After the line ``up`` writes, so that a reader of the file knows where it came from."""

_HEADER = re.compile(
    r"""^[ \t]*\[[ \t]*(plugins|"plugins")[ \t]*\.[ \t]*(hostsfile|"hostsfile")[ \t]*\]"""
    r"[ \t]*(#[^\n]*)?\r?$",
    re.MULTILINE,
)


class NodeConfigError(RoleserveError):
    """A node's roleserve.toml that ``up`` cannot add the hosts file's path to."""


def hosts_path_accepted(
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> bool:
    """Whether a node started by this process would accept ``[plugins.hostsfile] path``
    (see the module docstring). Loads the hostsfile plugin alone, not every plugin.

    :param entry_points: the installed ``roleserve.plugins`` entry points by default.
    """
    from roleserve_core.plugins import ENTRY_POINT_GROUP, PluginSet, PluginState

    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    found = [entry_point for entry_point in entry_points if entry_point.name == HOSTSFILE_PLUGIN]
    if not found:
        return False
    plugins = PluginSet.load(entry_points=found[:1], builtins=())
    info = plugins.info(HOSTSFILE_PLUGIN)
    return info.state is PluginState.LOADED and any(
        setting.name == PATH_SETTING for setting in info.settings
    )


def configured_hosts_file(config: Path) -> Path | None:
    """The ``[plugins.hostsfile] path`` of the node whose ``roleserve.toml`` is ``config``;
    None if it sets none (or cannot be read: the node says why when it starts)."""
    try:
        data = tomllib.loads(config.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    path = _hostsfile_section(data).get(PATH_SETTING)
    return Path(path) if isinstance(path, str) else None


def with_hosts_path(text: str, hosts: Path, source: Path) -> str | None:
    """``text`` (a ``roleserve.toml``) with ``[plugins.hostsfile] path = "<hosts>"``
    added, every other line as it was; None if it needs no change: it sets a path of its
    own, or is not valid TOML (left for the node to refuse).

    :param source: the file ``text`` came from, for the error.
    :raises NodeConfigError: if the path cannot be added as a line (the section is an
        inline table, or made of dotted keys).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    if not isinstance(data.get("plugins", {}), dict) or PATH_SETTING in _hostsfile_section(data):
        return None  # the node refuses a [plugins] that is no table, with its own message
    line = f"{PATH_SETTING} = {toml_literal(str(hosts))}  {MARK}\n"
    header = _HEADER.search(text)
    if header is not None:  # the line goes right under the section's header
        head, tail = text[: header.end()], text[header.end() :].removeprefix("\n")
        merged = f"{head}\n{line}{tail}"
    else:  # a section of its own, after a blank line
        head = text if not text or text.endswith("\n") else f"{text}\n"
        blank = "\n" if head.strip() and not head.endswith("\n\n") else ""
        merged = f"{head}{blank}[plugins.{HOSTSFILE_PLUGIN}]  {MARK}\n{line}"
    if not _only_path_added(data, merged, hosts):
        raise NodeConfigError(
            f"{source}: cannot add the node's own hosts file to its [plugins.hostsfile] "
            f"section; add the line {PATH_SETTING} = {toml_literal(str(hosts))} to it "
            "yourself (or any path of your choice), then run `cluster up` again"
        )
    return merged


def without_hosts_path(text: str) -> str | None:
    """``text`` without the lines ``with_hosts_path`` added (known by ``MARK``): the path,
    and the section's header if it added that and nothing else is left under it. None if
    it holds none of them, or if taking them out would change anything else (an operator
    who wrote under the header keeps it all).
    """
    lines = text.splitlines(keepends=True)
    ours = [i for i, line in enumerate(lines) if line.rstrip("\r\n").endswith(MARK)]
    if not ours:
        return None
    try:
        expected = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    section = _hostsfile_section(expected)
    section.pop(PATH_SETTING, None)
    paths = [i for i in ours if not _HEADER.match(lines[i])]
    headers = [i for i in ours if _HEADER.match(lines[i])]
    gone = set(paths)
    if not section and headers:
        del expected["plugins"][HOSTSFILE_PLUGIN]
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


def _hostsfile_section(data: dict[str, Any]) -> dict[str, Any]:
    plugins = data.get("plugins")
    section = plugins.get(HOSTSFILE_PLUGIN) if isinstance(plugins, dict) else None
    return section if isinstance(section, dict) else {}


def _only_path_added(before: dict[str, Any], merged: str, hosts: Path) -> bool:
    """Whether ``merged`` parses to ``before`` with the path added, and nothing else."""
    try:
        after = tomllib.loads(merged)
    except tomllib.TOMLDecodeError:
        return False
    plugins = after.get("plugins")
    section = plugins.get(HOSTSFILE_PLUGIN) if isinstance(plugins, dict) else None
    if not isinstance(section, dict) or section.pop(PATH_SETTING, None) != str(hosts):
        return False
    if not section and HOSTSFILE_PLUGIN not in before.get("plugins", {}):
        del after["plugins"][HOSTSFILE_PLUGIN]
        if not after["plugins"] and "plugins" not in before:
            del after["plugins"]
    return after == before
