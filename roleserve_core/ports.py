"""The core's standard ports, the same on every node's own address, and how endpoints
are written.

::

    7835  curator (gRPC: Curator, CuratorLocal, Management)     TCP
    7839  node management (gRPC: NodeManagement)                 TCP

The curator is the controlplane plugin's, but every node dials it, so its port is the
core's contract. Each plugin declares and documents its own ports in its top-level API and
its README: etcd's (7836 clients, 7837 peers, 7842 metrics: ``roleserve_controlplane``),
clusternet's WireGuard (7838 UDP: ``roleserve_clusternet``), the metrics plugin's HTTPS
server and node_exporter (7840, 7841: ``roleserve_metrics``), containerd's metrics (7846:
``roleserve_kubernetes``). Their old names here still answer, with a warning naming that
place, while the core accepts plugin API 1.

Exporters the metrics plugin proxies listen on the node's local exporter host
(``local_exporter_host``: 127.0.0.1, or the node's own address when that is a loopback
one), plain HTTP, never reachable from another machine.

Every node listens on its own address, never on a wildcard, so several nodes on one
machine each take a loopback address of their own (127.0.0.11, 127.0.0.12, ...) and keep
the standard ports, just as real nodes have their own IPs.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from roleserve_core._moved import TO_PLUGINS, moved_names

__all__ = [
    "CURATOR_PORT",
    "NODE_MANAGEMENT_PORT",
    "endpoint",
    "local_exporter_host",
    "split_endpoint",
]

CURATOR_PORT = 7835
NODE_MANAGEMENT_PORT = 7839


def local_exporter_host(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Where a node's local exporters listen: ``127.0.0.1``, unless the node's own
    ``address`` is a loopback address (several nodes on one machine, ``cluster up``):
    then that address, so each node's exporters keep the standard ports as its other
    services do, and still cannot be reached from another machine."""
    parsed = ipaddress.ip_address(str(address).strip("[]"))
    return str(parsed) if parsed.is_loopback else "127.0.0.1"


def endpoint(host: str | ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    text = str(host)
    if ":" in text and not text.startswith("["):
        text = f"[{text}]"
    return f"{text}:{port}"


def split_endpoint(text: str, default_port: int) -> tuple[str, int]:
    """``(host, port)`` of ``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT``.

    :raises ValueError: with a message naming ``text`` if it is not one of those.
    """
    text = text.strip()
    host, port = text, str(default_port)
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or (close + 1 < len(text) and text[close + 1] != ":"):
            raise ValueError(f"{text!r} is not HOST[:PORT]")
        host = text[1:close]
        if close + 1 < len(text):
            port = text[close + 2 :]  # "[V6]:" names no port: refused below, as "HOST:" is
    elif text.count(":") == 1:
        host, port = text.split(":")
    elif ":" in text and not _is_ipv6(text):
        raise ValueError(f"{text!r} is not HOST[:PORT] (an IPv6 address with a port: [V6]:PORT)")
    # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
    if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST[:PORT] with a port from 1 to 65535")
    return host, int(port)


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


if TYPE_CHECKING:
    # The plugins' ports, as type checkers see their old names here (a plugin checked with
    # mypy keeps passing); at run time, __getattr__ answers with the plugin's, and warns.
    ETCD_CLIENT_PORT: int
    ETCD_PEER_PORT: int
    ETCD_METRICS_PORT: int
    CLUSTERNET_PORT: int
    METRICS_PORT: int
    NODE_EXPORTER_PORT: int
    CONTAINERD_METRICS_PORT: int
else:
    # The plugins' ports, declared here until each plugin declared its own.
    __getattr__ = moved_names(
        __name__,
        {name: place for name, place in TO_PLUGINS.items() if name.endswith("_PORT")},
        api=1,
    )
