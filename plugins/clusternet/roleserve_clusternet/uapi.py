"""A small async client of the WireGuard UAPI: the text protocol on ``<ifname>.sock``.

wireguard-go (and every userspace WireGuard) serves the cross-platform UAPI on a unix
socket, ``/var/run/wireguard/<ifname>.sock``: a request is ``set=1`` or ``get=1``, then
``key=value`` lines, then an empty line; the answer is ``key=value`` lines ending with
``errno=N`` and an empty line (https://www.wireguard.com/xplatform/). Keys are hex there.

Why no library: on PyPI, the WireGuard packages write ``wg-quick`` files (wgconfig),
wrap the ``wg`` command, or speak the kernel's generic netlink (pyroute2's
``WireGuard``), which wireguard-go does not serve; none is a kept async UAPI client, and
the protocol is the forty lines below. Calling ``wg`` instead would mean a process per
call and parsing its output.

::

    DeviceChange ──encode_set──▶ "set=1\\nprivate_key=…\\npublic_key=…\\n…\\n\\n" ─▶ socket
    DeviceState ◀──parse_get──── "private_key=…\\nlisten_port=…\\npublic_key=…\\n…errno=0\\n\\n"

One connection per request: wireguard-go serves several on one connection, but a
connection per request leaves nothing to repair after a wireguard-go restart.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from roleserve_clusternet.device import (
    DeviceChange,
    DeviceState,
    IPNetwork,
    PeerState,
    parse_network,
    sorted_networks,
)
from roleserve_clusternet.errors import UapiError

__all__ = ["SOCKET_DIRECTORY", "UapiSocket", "encode_set", "parse_get", "socket_path"]

SOCKET_DIRECTORY = Path("/var/run/wireguard")
"""Where wireguard-go puts its sockets; shared by every network namespace of the
machine (it is a path in the mount namespace), so interface names must be unique.

Built into wireguard-go and ``wg`` alike (neither takes another directory), so not the
node's runtime directory (``roleserve_core.node_runtime_dir``) where the node's other
sockets are: its path is short (at most 39 bytes) whatever the data directory."""

TIMEOUT = 10.0
"""Seconds a request may take; wireguard-go answers in milliseconds."""


def socket_path(interface: str, directory: Path = SOCKET_DIRECTORY) -> Path:
    """The UAPI socket of ``interface``."""
    return directory / f"{interface}.sock"


def encode_set(change: DeviceChange) -> str:
    """The ``set=1`` request applying ``change``."""
    lines = ["set=1"]
    if change.private_key is not None:
        lines.append(f"private_key={change.private_key.hex()}")
    if change.listen_port is not None:
        lines.append(f"listen_port={change.listen_port}")
    for key in change.remove:
        lines += [f"public_key={key.hex()}", "remove=true"]
    for peer in change.peers:
        lines.append(f"public_key={peer.public_key.hex()}")
        if peer.endpoint is not None:
            lines.append(f"endpoint={peer.endpoint}")
        lines.append(f"persistent_keepalive_interval={peer.keepalive}")
        lines.append("replace_allowed_ips=true")
        lines += [f"allowed_ip={network}" for network in peer.allowed_ips]
    return "\n".join(lines) + "\n\n"


GET = "get=1\n\n"


def parse_get(text: str) -> DeviceState:
    """The device a ``get=1`` answer describes.

    :raises UapiError: an answer with ``errno`` other than 0, or that does not parse.
    """
    private_key: bytes | None = None
    listen_port = 0
    peers: dict[bytes, PeerState] = {}
    peer: dict[str, object] | None = None
    networks: list[IPNetwork] = []
    errno: int | None = None

    def finish() -> None:
        if peer is not None:
            key = peer["public_key"]
            assert isinstance(key, bytes)
            seconds = int(str(peer.get("last_handshake_time_sec", 0)))
            nanos = int(str(peer.get("last_handshake_time_nsec", 0)))
            peers[key] = PeerState(
                public_key=key,
                endpoint=str(peer["endpoint"]) if "endpoint" in peer else None,
                allowed_ips=sorted_networks(networks),
                keepalive=int(str(peer.get("persistent_keepalive_interval", 0))),
                last_handshake=seconds + nanos / 1e9 if seconds or nanos else None,
                rx_bytes=int(str(peer.get("rx_bytes", 0))),
                tx_bytes=int(str(peer.get("tx_bytes", 0))),
            )

    try:
        for line in text.splitlines():
            if not line:
                continue
            key, _, value = line.partition("=")
            if key == "errno":
                errno = int(value)
            elif key == "public_key":
                finish()
                peer = {"public_key": bytes.fromhex(value)}
                networks = []
            elif peer is None:
                if key == "private_key":
                    raw = bytes.fromhex(value)
                    private_key = raw if any(raw) else None
                elif key == "listen_port":
                    listen_port = int(value)
            elif key == "allowed_ip":
                networks.append(parse_network(value))
            else:
                peer[key] = value
        finish()
    except (ValueError, KeyError) as exc:
        raise UapiError(f"an answer to get=1 that does not parse: {exc}") from exc
    if errno != 0:
        raise UapiError(f"get=1 answered errno={errno}")
    return DeviceState(private_key, listen_port, peers)


class UapiSocket:
    """Requests to the UAPI socket of one interface."""

    def __init__(self, interface: str, path: Path | None = None) -> None:
        self.interface = interface
        self.path = path or socket_path(interface)

    async def set(self, change: DeviceChange) -> None:
        """Apply ``change`` (one ``set=1`` request).

        :raises UapiError: refused (``errno`` not 0) or the socket cannot be reached.
        """
        answer = await self.request(encode_set(change))
        if answer.strip() != "errno=0":
            raise UapiError(
                f"{self.interface}: WireGuard refused the configuration ({answer.strip()!r})"
            )

    async def get(self) -> DeviceState:
        """The device and its peers (one ``get=1`` request)."""
        answer = await self.request(GET)
        try:
            return parse_get(answer)
        except UapiError as exc:
            raise UapiError(f"{self.interface}: {exc}") from None

    async def request(self, text: str) -> str:
        """Send one request, return its answer (up to its empty line).

        :raises UapiError: the socket cannot be reached, or closed before answering.
        """
        try:
            with anyio.fail_after(TIMEOUT):
                async with await anyio.connect_unix(self.path) as stream:
                    await stream.send(text.encode())
                    answer = b""
                    while not answer.endswith(b"\n\n"):
                        answer += await stream.receive()
        except TimeoutError:
            raise UapiError(
                f"{self.interface}: no answer on {self.path} in {TIMEOUT:g} s"
            ) from None
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise UapiError(f"{self.interface}: cannot reach {self.path}: {reason}") from None
        return answer.decode()
