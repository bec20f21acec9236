"""The plugin's settings: ``[plugins.clusternet]`` in a node's ``roleserve.toml``.

The ``Setting`` records are the one source of names, types, defaults and docs (the
``roleserve_settings`` hook declares them, ``roleserve plugins`` lists them), and say which
values are allowed (a port in range, a cluster network that parses), so that the core
refuses any other before the node starts. ``ClusternetSettings`` gathers the checked values.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roleserve_core import Setting

__all__ = [
    "CLUSTER_NETWORK",
    "INTERFACE",
    "KEEPALIVE",
    "LISTEN_PORT",
    "MTU",
    "OFF",
    "RECONCILE_INTERVAL",
    "SETTINGS",
    "WIREGUARD_GO",
    "ClusternetSettings",
]

_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text)
    except ValueError:
        return False
    return True


INTERFACE: Setting[str] = Setting(
    "interface",
    str,
    "clusternet",
    "The WireGuard interface's name (at most 15 characters).",
    predicate=lambda name: _IFNAME.fullmatch(name) is not None,
    requirement="1 to 15 letters, digits, '_', '.' or '-'",
)
LISTEN_PORT: Setting[int] = Setting(
    "listen_port",
    int,
    7838,
    "The UDP port WireGuard listens on; every node must use the same.",
    minimum=1,
    maximum=65535,
)
KEEPALIVE: Setting[int] = Setting(
    "keepalive",
    int,
    25,
    "Persistent keepalive to each peer, in seconds; 0: off.",
    minimum=0,
    maximum=65535,
)
MTU: Setting[int] = Setting(
    "mtu", int, 1420, "The interface's MTU, in bytes.", minimum=1280, maximum=65535
)
CLUSTER_NETWORK: Setting[str] = Setting(
    "cluster_network",
    str,
    "10.192.0.0/11",
    "The cluster network (CIDR), routed through the interface; node prefixes are in it.",
    predicate=_is_network,
    requirement="a network in CIDR form, e.g. 10.192.0.0/11",
)
RECONCILE_INTERVAL: Setting[float] = Setting(
    "reconcile_interval",
    float,
    60.0,
    "Seconds between two checks of the whole interface against the wanted peers.",
    predicate=lambda seconds: seconds > 0,
    requirement="a number above 0",
)
WIREGUARD_GO: Setting[str | None] = Setting(
    "wireguard_go",
    str,
    None,
    "Path of the wireguard-go binary that runs the interface; unset: wireguard-go on PATH.",
)
OFF: Setting[str] = Setting(
    "off",
    str,
    "",
    "Why the mesh is off on this node, shown in `roleserve ctl tree` (the worker stays NEW, "
    "runs nothing, reads nothing); empty: the mesh runs. `roleserve cluster up` sets it on "
    "loopback clusters, whose nodes share one network namespace.",
)

SETTINGS: tuple[Setting[Any], ...] = (
    INTERFACE,
    LISTEN_PORT,
    KEEPALIVE,
    MTU,
    CLUSTER_NETWORK,
    RECONCILE_INTERVAL,
    WIREGUARD_GO,
    OFF,
)
"""Everything ``[plugins.clusternet]`` accepts, in the order ``roleserve plugins`` lists."""

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_NETWORK: IPNetwork = ipaddress.ip_network(CLUSTER_NETWORK.default)


@dataclass(frozen=True)
class ClusternetSettings:
    """The ``[plugins.clusternet]`` section, as the worker uses it (see ``SETTINGS``)."""

    interface: str = INTERFACE.default
    listen_port: int = LISTEN_PORT.default
    keepalive: int = KEEPALIVE.default
    mtu: int = MTU.default
    cluster_network: IPNetwork = DEFAULT_NETWORK
    reconcile_interval: float = RECONCILE_INTERVAL.default
    wireguard_go: str | None = None
    off: str = ""
    """Why the mesh is off here; empty: it runs."""

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> ClusternetSettings:
        """The settings of the plugin's ``NodeContext.config`` (checked by the core against
        the allowed values of ``SETTINGS``)."""
        return cls(
            interface=INTERFACE.read(config),
            listen_port=LISTEN_PORT.read(config),
            keepalive=KEEPALIVE.read(config),
            mtu=MTU.read(config),
            cluster_network=ipaddress.ip_network(CLUSTER_NETWORK.read(config)),
            reconcile_interval=float(RECONCILE_INTERVAL.read(config)),
            wireguard_go=WIREGUARD_GO.read(config),
            off=OFF.read(config).strip(),
        )
