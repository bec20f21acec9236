"""The plugin's settings: ``[plugins.hostsfile]`` in a node's ``roleserve.toml``.

``HostsfileSettings`` declares each setting once, as a field (``roleserve_core.setting``):
its name, type, default, doc and allowed values make the ``Setting`` record the
``roleserve_settings`` hook declares (``SETTINGS``), the core checks the file against, and
``roleserve plugins`` lists; ``HostsfileSettings.of`` gathers the checked values for the
worker. A path must be absolute (relative to what? the node's working directory is no place
an operator thinks of): the core refuses any other before the node starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roleserve_core import PluginSettings, Setting, former_setting_constants, setting

__all__ = ["SETTINGS", "HostsfileSettings"]


@dataclass(frozen=True)
class HostsfileSettings(PluginSettings):
    """The ``[plugins.hostsfile]`` section, as the worker uses it."""

    path: Path = setting(
        "path",
        str,
        "/etc/hosts",
        "The hosts file whose managed block lists every node's address and ID (absolute path).",
        predicate=lambda text: Path(text).is_absolute(),
        requirement="an absolute path",
        convert=Path,
    )
    hostname: bool = setting("hostname", bool, False, "Set the machine's hostname to the node ID.")
    machine_id: Path | None = setting(
        "machine_id",
        str,
        "",
        "A file to write the node ID to, 0644 (e.g. /etc/machine-id); empty: none.",
        predicate=lambda text: not text or Path(text).is_absolute(),
        requirement="an absolute path, or empty",
        convert=lambda text: Path(text) if text else None,
    )
    """None when the setting is empty (the default): no machine ID file."""


SETTINGS: tuple[Setting[Any], ...] = HostsfileSettings.declared()
"""Everything ``[plugins.hostsfile]`` accepts, in the order ``roleserve plugins`` lists."""


if not TYPE_CHECKING:
    # Before HostsfileSettings, each setting then declared was a ``Setting`` constant of
    # this module, named here as git history has them (a setting added since has
    # none); they still answer, with a warning naming the field's record.
    __getattr__ = former_setting_constants(
        __name__, HostsfileSettings, constants=("PATH", "HOSTNAME", "MACHINE_ID")
    )
