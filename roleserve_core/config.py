"""The node's configuration: ``roleserve.toml`` in its data directory.

::

    [node]
    address = "10.0.0.5"        # the address other nodes reach it at; else detected
    log_level = "info"          # debug, info, warning, error
    log_file = "node.log"       # log here (relative: in the data directory), rotated by
                                # size; unset: on stderr, for the journal
    log_max_bytes = 10485760    # rotate when the file reaches this size (10 MiB) ...
    log_files = 5               # ... keeping this many rotated files (node.log.1 ... .5)
    strict_plugins = false      # a plugin that fails to load stops the node

    [plugins.controlplane]      # one section per plugin, handed to it as NodeContext.config
    etcd = "/usr/bin/etcd"

A missing file means the defaults. Command-line options win over the file. An unknown key
in ``[node]``, a wrong type, or TOML that does not parse is refused with the file, the key
and what was expected, before the node starts anything.
"""

from __future__ import annotations

import ipaddress
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roleserve_core.errors import ConfigError

__all__ = ["LOG_LEVELS", "LogFiles", "NodeConfig", "load_config", "parse_address"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LOG_MAX_BYTES = 10 << 20
MIN_LOG_MAX_BYTES = 64 << 10
"""Below this, a file would hold too few lines to read a failure in."""
DEFAULT_LOG_FILES = 5
NODE_SETTINGS = ("address", "log_level", "log_file", "log_max_bytes", "log_files", "strict_plugins")


@dataclass(frozen=True)
class NodeConfig:
    """What ``roleserve.toml`` says (defaults for what it does not)."""

    address: IPAddress | None = None
    log_level: str = "info"
    log_file: Path | None = None
    """Where the node logs (rotated as the next two say); None: on stderr."""
    log_max_bytes: int = DEFAULT_LOG_MAX_BYTES
    log_files: int = DEFAULT_LOG_FILES
    strict_plugins: bool = False
    plugins: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``[plugins.<name>]`` sections by plugin name."""


@dataclass(frozen=True)
class LogFiles:
    """The node's log file and how it rotates: the file at most ``max_bytes`` long, then
    renamed ``.1`` (older ones ``.2`` ... up to ``.{files}``, the oldest dropped), so the
    log takes at most ``max_bytes × (files + 1)`` on disk."""

    path: Path
    max_bytes: int = DEFAULT_LOG_MAX_BYTES
    files: int = DEFAULT_LOG_FILES


def parse_address(text: str, what: str = "address") -> IPAddress:
    """An IP address, refusing host names, wildcards and link-local zones.

    :raises ConfigError: naming ``what``.
    """
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ConfigError(f"{what} {text!r} is not an IP address") from None
    if address.is_unspecified:
        raise ConfigError(f"{what} {text} is a wildcard; give the node's own address")
    if address.is_multicast:
        raise ConfigError(f"{what} {text} is a multicast address")
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        # ip_address accepts "fe80::1%eth0"; the zone means nothing on any other machine.
        raise ConfigError(
            f"{what} {text} names a network interface; give an address other nodes can reach"
        )
    return address


def load_config(path: Path) -> NodeConfig:
    """Read ``path``; the defaults if it does not exist.

    :raises ConfigError: saying which file and key is wrong.
    """
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return NodeConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    try:
        return _config(data, path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _config(data: Mapping[str, Any], directory: Path) -> NodeConfig:
    unknown = set(data) - {"node", "plugins"}
    if unknown:
        raise ConfigError(
            f"unknown sections {', '.join(sorted(unknown))}; expected [node], [plugins.NAME]"
        )
    node = _table(data, "node")
    plugins = _table(data, "plugins")
    for name, section in plugins.items():
        if not isinstance(section, dict):
            raise ConfigError(f"plugins.{name} must be a table ([plugins.{name}])")
    unknown = set(node) - set(NODE_SETTINGS)
    if unknown:
        raise ConfigError(
            f"unknown [node] settings {', '.join(sorted(unknown))}; "
            f"known: {', '.join(NODE_SETTINGS)}"
        )
    address = node.get("address")
    if address is not None and not isinstance(address, str):
        raise ConfigError("[node] address must be a string")
    level = node.get("log_level", "info")
    if level not in LOG_LEVELS:
        raise ConfigError(f"[node] log_level must be one of {', '.join(LOG_LEVELS)}")
    strict = node.get("strict_plugins", False)
    if not isinstance(strict, bool):
        raise ConfigError("[node] strict_plugins must be true or false")
    return NodeConfig(
        address=parse_address(address, "[node] address") if address else None,
        log_level=level,
        log_file=_log_file(node, directory),
        log_max_bytes=_integer(node, "log_max_bytes", DEFAULT_LOG_MAX_BYTES, MIN_LOG_MAX_BYTES),
        log_files=_integer(node, "log_files", DEFAULT_LOG_FILES, 1),
        strict_plugins=strict,
        plugins=plugins,
    )


def _log_file(node: Mapping[str, Any], directory: Path) -> Path | None:
    """``log_file``, relative to the data directory; None if unset."""
    path = node.get("log_file")
    if path is None:
        return None
    if not isinstance(path, str) or not path:
        raise ConfigError("[node] log_file must be a path (a non-empty string)")
    return directory / path


def _integer(node: Mapping[str, Any], key: str, default: int, least: int) -> int:
    value = node.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"[node] {key} must be a whole number of at least {least}")
    return value


def _table(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{name} must be a table ([{name}])")
    return table
