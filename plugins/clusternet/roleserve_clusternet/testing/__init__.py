"""clusternet's test kit, for its own tests and those of other plugins and benchmarks:

- ``netns``: network namespaces joined by a veth pair (the fixture ``netns_pair``,
  ``namespace_pair`` outside pytest), ``wg``, a TCP exchange across the mesh;
- ``hooks``: ``ClusternetHooks``, the plugin's hooks for a test node with the worker's test
  options;
- the pieces to make one end of a mesh by hand (the kubernetes plugin's two-node test joins
  a node running clusternet to one whose interface it sets up itself, with no second
  clusternet worker).

Its names are clusternet's own, gathered here so that another plugin's tests import them
through this kit, as tests/test_exports.py requires, never from clusternet's modules and
never by a file's path (a plugin's tests folder is not a package another can import).
"""

from __future__ import annotations

from roleserve_clusternet import link
from roleserve_clusternet.device import DeviceChange, PeerConfig
from roleserve_clusternet.interface import InterfaceSpec, open_interface
from roleserve_clusternet.privatekey import WireGuardKey, load_or_create_key
from roleserve_clusternet.settings import ClusternetSettings
from roleserve_clusternet.testing.hooks import ClusternetHooks
from roleserve_clusternet.testing.netns import (
    NetnsPair,
    Side,
    namespace_pair,
    netns_pair,
    real_wireguard_available,
    tcp_exchange,
    wg,
)
from roleserve_clusternet.worker_clusternet import configure_device

__all__ = [
    "ClusternetHooks",
    "ClusternetSettings",
    "DeviceChange",
    "InterfaceSpec",
    "NetnsPair",
    "PeerConfig",
    "Side",
    "WireGuardKey",
    "configure_device",
    "link",
    "load_or_create_key",
    "namespace_pair",
    "netns_pair",
    "open_interface",
    "real_wireguard_available",
    "tcp_exchange",
    "wg",
]
