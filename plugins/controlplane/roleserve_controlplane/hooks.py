"""etcd consensus and the curator: no workers yet.

It will run an etcd member and a curator on every node with the
``consensus_member`` role, and own the ``local_control_plane`` value. Until then it owns
that value's key, so that readers can be wired up, and runs nothing: the value stays
unset.
"""

from __future__ import annotations

from typing import Any

from roleserve_core import hookimpl
from roleserve_core.keys import LOCAL_CONTROL_PLANE
from roleserve_core.values import ValueKey

ROLESERVE_PLUGIN_API = 1


@hookimpl
def roleserve_values() -> list[ValueKey[Any]]:
    """The keys this plugin owns."""
    return [LOCAL_CONTROL_PLANE]
