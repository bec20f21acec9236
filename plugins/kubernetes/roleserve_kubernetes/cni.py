"""The pod network's CNI configuration: Debian's containernetworking-plugins (``bridge``,
``host-local``, ``loopback``) with this node's pod prefix.

::

    pod prefix (podnetwork) ──cni_conflist──▶ <data_dir>/cni/net.d/10-roleserve.conflist
                                                (written atomically, only when it changes;
                                                 containerd's CRI watches the directory)
    each pod: loopback (CRI's own), then bridge: a veth from the pod's namespace to the
    node's bridge ``rsp<10 hex>``; host-local: an address from the prefix (the bridge holds
    the first one, the pods' gateway), allocations under <data_dir>/cni/ipam

The bridge's name comes from the node ID, so two nodes on one machine make two bridges,
and at most 15 characters (``IFNAMSIZ``). No masquerade (``ipMasq``): pods reach other
nodes' pods over the cluster mesh by their own addresses, which is what clusternet routes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from pathlib import Path

from roleserve_core import write_atomically

__all__ = [
    "BRIDGE_PREFIX",
    "CNI_VERSION",
    "NETWORK_NAME",
    "bridge_name",
    "cni_conflist",
    "write_cni_config",
]

CNI_VERSION = "1.0.0"
"""What Debian's plugins (1.1.1) and containerd 1.6's libcni both speak."""
NETWORK_NAME = "roleserve"
BRIDGE_PREFIX = "rsp"
IFNAMSIZ = 15
"""The longest interface name Linux takes."""

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def bridge_name(node_id: str) -> str:
    """``rsp`` and 10 hex characters of the node ID's SHA-256: one bridge per node."""
    name = BRIDGE_PREFIX + hashlib.sha256(node_id.encode()).hexdigest()[:10]
    assert len(name) <= IFNAMSIZ
    return name


def cni_conflist(prefix: IPNetwork, bridge: str, ipam_dir: Path) -> str:
    """The network list's JSON for pods in ``prefix`` on ``bridge``."""
    default = "0.0.0.0/0" if prefix.version == 4 else "::/0"
    network = {
        "cniVersion": CNI_VERSION,
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(prefix)}]],
                    "routes": [{"dst": default}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }
    return json.dumps(network, indent=2) + "\n"


def write_cni_config(path: Path, text: str) -> bool:
    """Write the configuration unless it already says ``text``; True if written."""
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text.encode(), 0o644)
    return True
