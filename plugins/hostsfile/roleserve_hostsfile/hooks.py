"""Cluster name resolution and the saved cluster directory: no workers yet.

It will resolve node IDs to addresses and save the directory of control-plane
nodes that a restarting node rejoins through, owning ``cluster_directory_saved``. Until then
it owns that key and runs nothing: the value stays unset.
"""

from __future__ import annotations

from typing import Any

from roleserve_core import hookimpl
from roleserve_core.keys import CLUSTER_DIRECTORY_SAVED
from roleserve_core.values import ValueKey

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The keys this plugin owns."""
    return [CLUSTER_DIRECTORY_SAVED]
