"""``roleserve plugins``: every plugin, with its distribution, version, state and contents.

The listing comes from the same code that starts a node: the plugins are loaded, and a
``NodeRuntime`` is assembled (without starting anything) to learn each plugin's values and
workers. So what this prints is what a node would run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roleserve_core.cli._table import fill, output_width, render_table
from roleserve_core.errors import ConfigError, EssentialPluginError, PluginError
from roleserve_core.settings import toml_literal

if TYPE_CHECKING:
    from roleserve_core.plugin_loader import PluginInfo
    from roleserve_core.settings import Setting

__all__ = ["add_parser", "run"]

LISTING_DATA_DIR = Path("/var/lib/roleserve")
"""Shown as the data directory in plugin contexts; never created by the listing."""
HEADERS = ("NAME", "DISTRIBUTION", "VERSION", "STATE", "WORKERS", "VALUES", "HOOKS")
NOTES = ("WORKERS", "VALUES", "HOOKS")
"""Lists, under each row instead when the table is wider than the terminal."""
SETTINGS_HEADERS = ("SETTING", "TYPE", "DEFAULT", "DESCRIPTION")
SETTINGS_INDENT = "    "


def add_parser(commands: Any) -> None:
    """Register ``roleserve plugins``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "plugins",
        description=(
            "List every plugin (built-in and installed through the 'roleserve.plugins' "
            "entry points): distribution, version, whether it loaded, the hooks it "
            "implements, the workers it runs, the values it owns, and the settings it "
            "accepts in roleserve.toml ([plugins.NAME]) with their types, defaults and "
            "docs. Honours "
            "ROLESERVE_PLUGINS (allow list) and ROLESERVE_DISABLE_PLUGINS (block list)."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead")
    parser.add_argument(
        "--strict",
        action="store_true",
        help=(
            "fail (exit 1) if any plugin fails to load or implements a hook that no plugin "
            "defines, as `node run --strict-plugins` would"
        ),
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """List the plugins. Exit 0 even if some failed (the listing shows why), unless
    ``--strict``: then 1. Exit 2 if the selection itself is invalid."""
    # Imported here: `roleserve --help` registers this command without loading pluggy.
    from roleserve_core.plugin_loader import PluginSet
    from roleserve_core.runtime import NodeRuntime

    try:
        plugins = PluginSet.load(strict=args.strict)
        NodeRuntime(plugins, data_dir=LISTING_DATA_DIR)
    except (EssentialPluginError, ConfigError) as exc:  # a plugin refusing its defaults
        print(f"roleserve plugins: {exc}", file=sys.stderr)
        return 2
    except PluginError as exc:
        print(f"roleserve plugins: {exc}", file=sys.stderr)
        return 1
    infos = plugins.infos()
    if args.json:
        print(json.dumps([info.as_json() for info in infos], indent=2))
        # Warnings that belong to no plugin have no place in the list; stdout stays the
        # JSON a script parses, and they still reach the person who ran it.
        for warning in plugins.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    else:
        print(_format(infos, plugins.warnings, output_width()))
    return 0


def _cell(items: list[str]) -> str:
    return ", ".join(items) if items else "-"


def _settings(info: PluginInfo, width: int | None) -> list[str]:
    """The plugin's settings as an indented table; nothing if it declares none."""
    if not info.settings:
        return []
    rows = [
        [setting.name, setting.type_name, toml_literal(setting.default), _described(setting)]
        for setting in info.settings
    ]
    inside = None if width is None else width - len(SETTINGS_INDENT)
    table = render_table(SETTINGS_HEADERS, rows, width=inside, notes=("DESCRIPTION",))
    heading = fill(f"settings ([plugins.{info.name}] in roleserve.toml):", width, indent="  ")
    return [heading, *(f"{SETTINGS_INDENT}{line}" for line in table.splitlines())]


def _worker_lines(info: PluginInfo, width: int | None) -> list[str]:
    """A line per worker with its doc (``Worker.doc``); none for the core's built-in
    workers, each a plugin of its own whose description says what it does."""
    if info.builtin:
        return []
    return [
        fill(f"worker {name}: {doc}", width, indent="  ")
        for name, doc in info.worker_docs.items()
        if doc
    ]


def _described(setting: Setting[Any]) -> str:
    """The setting's doc, and what it allows if not every value of its type."""
    if setting.allowed == setting.expected:
        return setting.doc
    return f"{setting.doc} Allowed: {setting.allowed}."


def _format(infos: list[PluginInfo], warnings: list[str], width: int | None) -> str:
    """The table, then each plugin's description and details; every line at most
    ``width`` characters (None: as long as it needs)."""
    rows = [
        [
            info.name,
            info.distribution or "-",
            info.version or "-",
            str(info.state),
            _cell(info.workers),
            _cell(info.values),
            _cell(info.hooks),
        ]
        for info in infos
    ]
    out = [render_table(HEADERS, rows, width=width, notes=NOTES), ""]
    for info in infos:
        out.append(fill(f"{info.name}: {info.description or '(no description)'}", width))
        if info.reason:
            out.append(fill(f"blocked: {info.reason}", width, indent="  "))
        if info.file and (info.error or info.warnings):
            out.append(fill(f"file: {info.file}", width, indent="  "))
        if info.error:
            out.append(fill(f"error: {info.error}", width, indent="  "))
        out.extend(_worker_lines(info, width))
        out.extend(_settings(info, width))
        out.extend(fill(f"warning: {warning}", width, indent="  ") for warning in info.warnings)
        for hook, count in sorted(info.hook_failures.items()):
            out.append(fill(f"{hook} failed {count} time(s)", width, indent="  "))
    out.extend(fill(f"warning: {warning}", width) for warning in warnings)
    return "\n".join(out)
