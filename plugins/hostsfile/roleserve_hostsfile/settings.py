"""The plugin's settings: ``[plugins.hostsfile]`` in a node's ``roleserve.toml``.

The ``Setting`` records are the one source of the names, types, defaults and docs: the
``roleserve_settings`` hook declares them, the core checks the file against them, and
``roleserve plugins`` lists them. A path must be absolute (relative to what? the node's
working directory is no place an operator thinks of): the core refuses any other before the
node starts. ``HostsfileSettings`` gathers the checked values for the worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roleserve_core import Setting

__all__ = ["HOSTNAME", "MACHINE_ID", "PATH", "SETTINGS", "HostsfileSettings"]

PATH: Setting[str] = Setting(
    "path",
    str,
    "/etc/hosts",
    "The hosts file whose managed block lists every node's address and ID (absolute path).",
    predicate=lambda path: Path(path).is_absolute(),
    requirement="an absolute path",
)
HOSTNAME: Setting[bool] = Setting(
    "hostname", bool, False, "Set the machine's hostname to the node ID."
)
MACHINE_ID: Setting[str] = Setting(
    "machine_id",
    str,
    "",
    "A file to write the node ID to, 0644 (e.g. /etc/machine-id); empty: none.",
    predicate=lambda path: not path or Path(path).is_absolute(),
    requirement="an absolute path, or empty",
)

SETTINGS: tuple[Setting[Any], ...] = (PATH, HOSTNAME, MACHINE_ID)
"""Everything ``[plugins.hostsfile]`` accepts, in the order ``roleserve plugins`` lists."""


@dataclass(frozen=True)
class HostsfileSettings:
    """The ``[plugins.hostsfile]`` section, as the worker uses it (see ``SETTINGS``)."""

    path: Path = Path(PATH.default)
    hostname: bool = HOSTNAME.default
    machine_id: Path | None = None
    """None when the setting is empty (the default): no machine ID file."""

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> HostsfileSettings:
        """The settings of the plugin's ``NodeContext.config`` (checked by the core)."""
        machine_id = MACHINE_ID.read(config)
        return cls(
            path=Path(PATH.read(config)),
            hostname=HOSTNAME.read(config),
            machine_id=Path(machine_id) if machine_id else None,
        )
