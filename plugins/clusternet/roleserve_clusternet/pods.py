"""The pod prefixes clusternet announces: the kubernetes plugin's ``pod_network``, when it
is installed and loaded.

clusternet runs without Kubernetes (it then announces the node's own prefix only), so it
must not need the kubernetes plugin: it imports the key through that plugin's declared API
(``roleserve_kubernetes``'s top level) only if the package is installed, and reads it only
if a loaded plugin declares it (installed but disabled: no key). Not a key of its own of
the same name: the registry refuses a reader whose key's type is not the owner's, so a
look-alike would fail exactly when both plugins run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roleserve_core import PluginValues, ValueKey

if TYPE_CHECKING:
    from roleserve_kubernetes import PodNetwork

__all__ = ["pod_network_key"]


def pod_network_key(values: PluginValues) -> ValueKey[PodNetwork] | None:
    """``pod_network``'s key if a loaded plugin declares it, else None."""
    try:
        from roleserve_kubernetes import POD_NETWORK
    except ModuleNotFoundError as exc:
        if exc.name != "roleserve_kubernetes":
            raise  # installed but broken (a module of its own missing): not ours to hide
        return None  # the kubernetes plugin is not installed: no pods to announce
    return POD_NETWORK if POD_NETWORK in values else None
