"""``roleserve node config``: the configuration a node would run with, checked.

An operator who edits ``roleserve.toml`` learns here, without stopping the node, whether the
next start would accept it, and sees every default in effect. The check is the node's own:
the plugins are loaded and a ``NodeRuntime`` is assembled (nothing starts, the data
directory is neither locked nor written), so a file this command accepts is one the node
accepts, and a refusal is the same one line: a setting a plugin does not allow, a plugin's
own refusal in ``roleserve_workers``, an ``[node] address`` other than the one the node
saved at its first start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roleserve_core.config import NodeConfig
    from roleserve_core.settings import Setting

__all__ = ["add_subparser"]


def add_subparser(subcommands: Any) -> None:
    """Register ``roleserve node config`` under ``roleserve node``."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        "config",
        help="check DATA_DIR/roleserve.toml and print the configuration a node would use",
        description=(
            "Check the node's roleserve.toml as `node run` would (every [plugins.NAME] "
            "section against its plugin's settings) and print the configuration in "
            "effect, defaults filled in, each plugin setting with its doc. Exit 2, with "
            "the reason, if the node would refuse it. Writes nothing."
        ),
    )
    parser.add_argument("--data-dir", required=True, type=Path, help="the node's data directory")
    parser.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the effective configuration; exit 2 if the node would refuse it."""
    # Imported here: the rest of the CLI need not pay for plugins and the runtime.
    from roleserve_core.config import load_config
    from roleserve_core.daemon import checked_address, config_address_source
    from roleserve_core.datadir import NodeDataDirectory
    from roleserve_core.errors import NodeSetupError, PluginError
    from roleserve_core.plugin_loader import PluginSet
    from roleserve_core.runtime import NodeRuntime

    datadir = NodeDataDirectory(args.data_dir)
    path = datadir.config
    try:
        with _warnings_on_stderr():
            config = load_config(path)
            checked_address(datadir, config.address, config_address_source(datadir))
            plugins = PluginSet.load(strict=config.strict_plugins)
            runtime = NodeRuntime(
                plugins, data_dir=args.data_dir, config=config.plugins, config_source=str(path)
            )
    except (NodeSetupError, PluginError) as exc:
        print(f"roleserve node: error: {exc}", file=sys.stderr)
        return 2
    settings = plugins.settings()
    if args.json:
        print(json.dumps(_as_json(config, runtime.config), indent=2))
    else:
        print(_as_toml(path, config, runtime.config, settings))
    return 0


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """What the node would log while it assembles (a section left unchecked, a plugin that
    failed to load), one line each on stderr, as ``WARNING: ...``."""
    from roleserve_core.logtree import PROCESS_LOGGER

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    process = logging.getLogger(PROCESS_LOGGER)
    process.addHandler(handler)
    try:
        yield
    finally:
        process.removeHandler(handler)


def _node_section(config: NodeConfig) -> dict[str, Any]:
    return {
        "address": None if config.address is None else str(config.address),
        "log_level": config.log_level,
        "log_file": None if config.log_file is None else str(config.log_file),
        "log_max_bytes": config.log_max_bytes,
        "log_files": config.log_files,
        "strict_plugins": config.strict_plugins,
    }


def _as_json(config: NodeConfig, plugins: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "node": _node_section(config),
        "plugins": {name: dict(values) for name, values in plugins.items()},
    }


def _as_toml(
    path: Path,
    config: NodeConfig,
    plugins: Mapping[str, Mapping[str, Any]],
    settings: Mapping[str, list[Setting[Any]]],
) -> str:
    """TOML a node would read the same way: unset values and docs are comments."""
    from roleserve_core.settings import toml_literal

    lines = [f"# {path}, as a node would run with it (defaults filled in)", "", "[node]"]
    for key, value in _node_section(config).items():
        lines.append(f"# {key}: not set" if value is None else f"{key} = {toml_literal(value)}")
    for name, declared in settings.items():
        if not declared:
            continue
        lines += ["", f"[plugins.{name}]"]
        for setting in declared:
            value = plugins[name][setting.name]
            lines.append(f"# {setting.doc}")
            if value is None:
                lines.append(f"# {setting.name}: not set")
            else:
                lines.append(f"{setting.name} = {toml_literal(value)}")
    return "\n".join(lines)
