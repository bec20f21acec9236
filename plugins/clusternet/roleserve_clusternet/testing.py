"""clusternet's test kit, for the tests of other plugins: the pieces to make one end of a
mesh by hand (the kubernetes plugin's two-node test joins a node running clusternet to one
whose interface it sets up itself, with no second clusternet worker).

Its names are clusternet's own, gathered here so that another plugin's tests import them
through this kit, as tests/test_exports.py requires, and never from clusternet's modules.
"""

from __future__ import annotations

from roleserve_clusternet import link
from roleserve_clusternet.device import DeviceChange, PeerConfig
from roleserve_clusternet.interface import InterfaceSpec, open_interface
from roleserve_clusternet.privatekey import WireGuardKey, load_or_create_key
from roleserve_clusternet.settings import ClusternetSettings
from roleserve_clusternet.worker_clusternet import configure_device

__all__ = [
    "ClusternetSettings",
    "DeviceChange",
    "InterfaceSpec",
    "PeerConfig",
    "WireGuardKey",
    "configure_device",
    "link",
    "load_or_create_key",
    "open_interface",
]
