"""Finding the node's own address when ``--address`` and roleserve.toml do not say it.

The address other nodes reach this one at is the address of the interface that carries the
default route: the one a packet to elsewhere would leave from. It is read from the kernel's
routing table (``/proc/net/route``) and the interface's address (``SIOCGIFADDR``), without
sending anything.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from pathlib import Path

from roleserve_core.errors import ConfigError

__all__ = ["default_route_interface", "detect_address", "interface_address"]

ROUTE_TABLE = Path("/proc/net/route")
SIOCGIFADDR = 0x8915


def default_route_interface(table: str) -> str | None:
    """The interface of the IPv4 default route in a ``/proc/net/route`` text, if any."""
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[1] == "00000000" and fields[7] == "00000000":
            return fields[0]
    return None


def interface_address(interface: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address of ``interface``, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("256s", interface.encode()[:15])
        try:
            answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
        except OSError:
            return None
    return ipaddress.IPv4Address(answer[20:24])


def detect_address() -> ipaddress.IPv4Address:
    """The address of the default route's interface.

    :raises ConfigError: if there is no default route or it has no IPv4 address.
    """
    try:
        interface = default_route_interface(ROUTE_TABLE.read_text())
    except OSError:
        interface = None
    address = interface_address(interface) if interface else None
    if address is None:
        raise ConfigError(
            "cannot find this node's address (no IPv4 default route); pass --address or "
            "set [node] address in roleserve.toml"
        )
    return address
