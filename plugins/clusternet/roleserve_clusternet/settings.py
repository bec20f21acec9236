"""The plugin's settings: ``[plugins.clusternet]`` in a node's ``roleserve.toml``.

The ``Setting`` records are the one source of names, types, defaults and docs (the
``roleserve_settings`` hook declares them, ``roleserve plugins`` lists them);
``ClusternetSettings`` gathers the checked values and refuses those of the right type that
make no sense (a port out of range, a cluster network that does not parse).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from roleserve_core import ConfigError, Setting

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

INTERFACE: Setting[str] = Setting(
    "interface", str, "clusternet", "The WireGuard interface's name (at most 15 characters)."
)
LISTEN_PORT: Setting[int] = Setting(
    "listen_port", int, 7838, "The UDP port WireGuard listens on; every node must use the same."
)
KEEPALIVE: Setting[int] = Setting(
    "keepalive", int, 25, "Persistent keepalive to each peer, in seconds; 0: off."
)
MTU: Setting[int] = Setting("mtu", int, 1420, "The interface's MTU, in bytes.")
CLUSTER_NETWORK: Setting[str] = Setting(
    "cluster_network",
    str,
    "10.192.0.0/11",
    "The cluster network (CIDR), routed through the interface; node prefixes are in it.",
)
RECONCILE_INTERVAL: Setting[float] = Setting(
    "reconcile_interval",
    float,
    60.0,
    "Seconds between two checks of the whole interface against the wanted peers.",
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

_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")

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
        """The settings of the plugin's ``NodeContext.config`` (types checked by the core).

        :raises ConfigError: for a value of the right type that cannot work, naming it.
        """
        interface = INTERFACE.read(config)
        if not _IFNAME.match(interface):
            _refuse(INTERFACE.name, interface, "1 to 15 letters, digits, '_', '.' or '-'")
        port = LISTEN_PORT.read(config)
        if not 0 < port < 65536:
            _refuse(LISTEN_PORT.name, port, "a port from 1 to 65535")
        keepalive = KEEPALIVE.read(config)
        if not 0 <= keepalive < 65536:
            _refuse(KEEPALIVE.name, keepalive, "0 (off) to 65535 seconds")
        mtu = MTU.read(config)
        if not 1280 <= mtu <= 65535:
            _refuse(MTU.name, mtu, "1280 to 65535 bytes")
        text = CLUSTER_NETWORK.read(config)
        try:
            network = ipaddress.ip_network(text)
        except ValueError:
            _refuse(CLUSTER_NETWORK.name, text, "a network in CIDR form, e.g. 10.192.0.0/11")
        interval = RECONCILE_INTERVAL.read(config)
        if not interval > 0:
            _refuse(RECONCILE_INTERVAL.name, interval, "more than 0 seconds")
        return cls(
            interface=interface,
            listen_port=port,
            keepalive=keepalive,
            mtu=mtu,
            cluster_network=network,
            reconcile_interval=float(interval),
            wireguard_go=WIREGUARD_GO.read(config),
            off=OFF.read(config).strip(),
        )


def _refuse(name: str, value: object, expected: str) -> NoReturn:
    raise ConfigError(f"[plugins.clusternet] {name} must be {expected}, not {value!r}")
