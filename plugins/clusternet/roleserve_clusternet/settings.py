"""The plugin's settings: ``[plugins.clusternet]`` in a node's ``roleserve.toml``.

``ClusternetSettings`` declares each setting once, as a field (``roleserve_core.setting``):
its name, type, default, doc and allowed values (a port in range, a cluster network that
parses) make the ``Setting`` record the ``roleserve_settings`` hook declares (``SETTINGS``),
the core checks the file against before the node starts, and ``roleserve plugins`` lists;
``ClusternetSettings.of`` gathers the checked values for the worker.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roleserve_clusternet.device import IPNetwork
from roleserve_clusternet.ports import CLUSTERNET_PORT
from roleserve_core import PluginSettings, Setting, former_setting_constants, port_setting, setting

__all__ = ["SETTINGS", "ClusternetSettings"]

_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class ClusternetSettings(PluginSettings):
    """The ``[plugins.clusternet]`` section, as the worker uses it."""

    interface: str = setting(
        "interface",
        str,
        "clusternet",
        "The WireGuard interface's name (at most 15 characters).",
        predicate=lambda name: _IFNAME.fullmatch(name) is not None,
        requirement="1 to 15 letters, digits, '_', '.' or '-'",
    )
    listen_port: int = port_setting(
        "listen_port",
        CLUSTERNET_PORT,
        "The UDP port WireGuard listens on; every node must use the same.",
    )
    keepalive: int = setting(
        "keepalive",
        int,
        0,
        "Persistent keepalive to each peer, in seconds; 0: off (Monogon's), as between "
        "nodes that reach one another directly; 25 keeps a NAT's mapping open.",
        minimum=0,
        maximum=65535,
    )
    mtu: int = setting(
        "mtu", int, 1420, "The interface's MTU, in bytes.", minimum=1280, maximum=65535
    )
    cluster_network: IPNetwork = setting(
        "cluster_network",
        str,
        "10.192.0.0/11",
        "The cluster network (CIDR), routed through the interface; node prefixes are in it.",
        predicate=_is_network,
        requirement="a network in CIDR form, e.g. 10.192.0.0/11",
        convert=ipaddress.ip_network,
    )
    reconcile_interval: float = setting(
        "reconcile_interval",
        float,
        60.0,
        "Seconds between two checks of the whole interface against the wanted peers.",
        predicate=lambda seconds: seconds > 0,
        requirement="a number above 0",
        convert=float,  # a hand-made config may hold an int
    )
    wireguard_go: str | None = setting(
        "wireguard_go",
        str,
        None,
        "Path of the wireguard-go binary that runs the interface; unset: wireguard-go on PATH.",
    )
    off: str = setting(
        "off",
        str,
        "",
        "Why the mesh is off on this node, shown in `roleserve ctl tree` (the worker stays "
        "NEW, runs nothing, reads nothing); empty: the mesh runs. `roleserve cluster up` sets "
        "it on loopback clusters, whose nodes share one network namespace.",
        convert=str.strip,
    )
    """Why the mesh is off here; empty: it runs."""


SETTINGS: tuple[Setting[Any], ...] = ClusternetSettings.declared()
"""Everything ``[plugins.clusternet]`` accepts, in the order ``roleserve plugins`` lists."""


if not TYPE_CHECKING:
    # Before ClusternetSettings, each setting then declared was a ``Setting`` constant of
    # this module, named here as git history has them (a setting added since has
    # none); they still answer, with a warning naming the field's record.
    __getattr__ = former_setting_constants(
        __name__,
        ClusternetSettings,
        constants=(
            "INTERFACE",
            "LISTEN_PORT",
            "KEEPALIVE",
            "MTU",
            "CLUSTER_NETWORK",
            "RECONCILE_INTERVAL",
            "WIREGUARD_GO",
            "OFF",
        ),
    )
