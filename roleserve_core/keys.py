"""Plugin API 1's module of the core's value keys, now ``roleserve_core.values``.

Kept for plugins written for plugin API 1, which documented ``from roleserve_core.keys
import ROLES``: every name it exported still imports from here, with a
``DeprecationWarning`` naming its place today (``roleserve_core``'s top level, where the
plugin API is; ``SHARED_KEYS``, which is not, from ``roleserve_core.values``; the
kubernetes plugin's keys and their types from ``roleserve_kubernetes``). It goes
when the core stops accepting plugin API 1 (docs/plugin-guide.md, "The plugin API
promise"). Nothing here is defined anew: each name is the very object of its new place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roleserve_core._moved import TO_PLUGINS, moved_names

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ answers, and warns
    from roleserve_core.values import BOOTSTRAP as BOOTSTRAP
    from roleserve_core.values import BOOTSTRAPPED as BOOTSTRAPPED
    from roleserve_core.values import CLUSTER_NODES as CLUSTER_NODES
    from roleserve_core.values import CURATOR_CONNECTION as CURATOR_CONNECTION
    from roleserve_core.values import HANDLED_CUSTOM_ROLES as HANDLED_CUSTOM_ROLES
    from roleserve_core.values import LOCAL_CONTROL_PLANE as LOCAL_CONTROL_PLANE
    from roleserve_core.values import NETWORK as NETWORK
    from roleserve_core.values import NODE_CREDENTIALS as NODE_CREDENTIALS
    from roleserve_core.values import NODE_ID as NODE_ID
    from roleserve_core.values import REVOKED_CREDENTIALS as REVOKED_CREDENTIALS
    from roleserve_core.values import ROLES as ROLES
    from roleserve_core.values import SHARED_KEYS as SHARED_KEYS
    from roleserve_core.values import Bootstrapped as Bootstrapped
    from roleserve_core.values import BootstrapRequest as BootstrapRequest
    from roleserve_core.values import CuratorConnection as CuratorConnection
    from roleserve_core.values import LocalControlPlane as LocalControlPlane
    from roleserve_core.values import NetworkStatus as NetworkStatus
    from roleserve_core.values import RevokedCredentials as RevokedCredentials

__all__ = [
    "BOOTSTRAP",
    "BOOTSTRAPPED",
    "CLUSTER_NODES",
    "CURATOR_CONNECTION",
    "HANDLED_CUSTOM_ROLES",
    "LOCAL_CONTROL_PLANE",
    "NETWORK",
    "NODE_CREDENTIALS",
    "NODE_ID",
    "REVOKED_CREDENTIALS",
    "ROLES",
    "SHARED_KEYS",
    "BootstrapRequest",
    "Bootstrapped",
    "CuratorConnection",
    "LocalControlPlane",
    "NetworkStatus",
    "RevokedCredentials",
]

if not TYPE_CHECKING:
    __getattr__ = moved_names(
        __name__,
        {
            **{name: TO_PLUGINS.get(name, f"roleserve_core:{name}") for name in __all__},
            "SHARED_KEYS": "roleserve_core.values:SHARED_KEYS",
            **{
                name: TO_PLUGINS[name]
                for name in ("KUBERNETES_STATUS", "POD_NETWORK", "KubernetesStatus", "PodNetwork")
            },
        },
        api=1,
    )
