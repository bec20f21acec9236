"""What a WireGuard interface is configured with and reads back, and the boundary to it.

The workers never speak to an interface directly: they go through a ``MeshInterface``,
which has two implementations:

- ``uapi.UapiInterface``: a real interface, peers over the WireGuard UAPI socket,
  addresses over netlink (``link``);
- ``MemoryInterface`` (here): a dict, for tests of the decisions (which peers, when to
  retry) without a kernel, a TUN device or root. It can be told to fail the next calls.

::

    pull, reconcile ──DeviceChange──▶ MeshInterface.configure ──▶ UAPI set=1 / memory
                    ◀──DeviceState─── MeshInterface.read      ◀── UAPI get=1 / memory

Keys are raw 32-byte strings here; base64 (the curator, ``wg``) and hex (UAPI) are the
encodings' business.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import anyio.lowlevel

from roleserve_clusternet.errors import LinkError, UapiError
from roleserve_core import Value

__all__ = [
    "DeviceChange",
    "DeviceState",
    "IPInterface",
    "IPNetwork",
    "MemoryInterface",
    "MeshInterface",
    "PeerConfig",
    "PeerState",
    "parse_network",
    "sorted_networks",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


@functools.lru_cache(maxsize=1 << 16)
def parse_network(text: str) -> IPNetwork:
    """``ipaddress.ip_network(text)``, remembered: every view of the cluster and every read
    of the interface parses each peer's prefixes again (1,000 peers: ~14 ms a read), and
    they rarely change.

    :raises ValueError: if ``text`` is no network.
    """
    return ipaddress.ip_network(text)


def sorted_networks(networks: Iterable[IPNetwork]) -> tuple[IPNetwork, ...]:
    """``networks`` without duplicates, IPv4 first, by address then length: the one order
    in which two sets of prefixes are compared by value."""
    return tuple(
        sorted(set(networks), key=lambda n: (n.version, int(n.network_address), n.prefixlen))
    )


def short_key(key: bytes) -> str:
    """The first characters of a key's base64, for log lines."""
    return base64.b64encode(key).decode()[:8] + "…"


@dataclass(frozen=True)
class PeerConfig:
    """One peer as the node wants it."""

    public_key: bytes
    endpoint: str | None
    """``host:port`` (IPv6 in brackets); None: wait for the peer to reach us."""
    allowed_ips: tuple[IPNetwork, ...]
    """The prefixes routed to this peer, in ``sorted_networks`` order."""
    keepalive: int = 0
    """Persistent keepalive in seconds; 0: off."""


@dataclass(frozen=True)
class PeerState(PeerConfig):
    """One peer as the interface reports it."""

    last_handshake: float | None = None
    """Seconds since the epoch of its last handshake; None: never."""
    rx_bytes: int = 0
    tx_bytes: int = 0

    def config(self) -> PeerConfig:
        """What of it is configuration (what is compared with the wanted peer)."""
        return PeerConfig(self.public_key, self.endpoint, self.allowed_ips, self.keepalive)


@dataclass(frozen=True)
class DeviceState:
    """What ``read`` gives back: the device and each of its peers."""

    private_key: bytes | None
    listen_port: int
    peers: Mapping[bytes, PeerState] = field(default_factory=dict)
    """Public key → peer."""


@dataclass(frozen=True)
class DeviceChange:
    """One ``configure`` call: what changes, nothing else touched.

    Each peer in ``peers`` is set whole (endpoint, keepalive, and its allowed IPs replacing
    the old ones); each key in ``remove`` is removed. The UAPI applies one change as one
    request: the interface never shows half of it.
    """

    private_key: bytes | None = None
    listen_port: int | None = None
    peers: tuple[PeerConfig, ...] = ()
    remove: tuple[bytes, ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.private_key is not None
            or self.listen_port is not None
            or self.peers
            or self.remove
        )


class MeshInterface(Protocol):
    """The interface the workers configure; see the module docstring."""

    @property
    def name(self) -> str:
        """The interface's name."""
        ...

    async def configure(self, change: DeviceChange) -> None:
        """Apply ``change`` as one request.

        :raises UapiError: refused or unreachable; nothing of it may have been applied.
        """
        ...

    async def read(self) -> DeviceState:
        """The device and its peers as they are now.

        :raises UapiError: unreachable.
        """
        ...

    async def set_address(self, address: IPInterface | None) -> None:
        """Make ``address`` the interface's only address (None: no address).

        :raises LinkError: netlink refused.
        """
        ...


class MemoryInterface:
    """A ``MeshInterface`` in memory, for tests: ``changes`` records every ``configure``
    that succeeded, in order (a ``Value``, to wait on), ``failed`` those refused;
    ``fail(n)`` makes the next ``n`` calls of ``configure`` raise ``UapiError`` and apply
    nothing, ``fail_address(n)`` those of ``set_address`` raise ``LinkError``."""

    def __init__(self, name: str = "clusternet") -> None:
        self._name = name
        self.state = DeviceState(None, 0, {})
        self.address: Value[IPInterface | None] = Value()
        self.address.set(None)
        self.changes: Value[tuple[DeviceChange, ...]] = Value()
        self.changes.set(())
        self.failed: list[DeviceChange] = []
        self._failures = 0
        self.address_calls = 0
        """How many times ``set_address`` was called (each a netlink session on a real one)."""
        self._address_failures = 0

    @property
    def name(self) -> str:
        return self._name

    def fail(self, count: int = 1) -> None:
        """Fail the next ``count`` calls of ``configure``."""
        self._failures = count

    def fail_address(self, count: int = 1) -> None:
        """Fail the next ``count`` calls of ``set_address`` (``LinkError``)."""
        self._address_failures = count

    def remove_peer(self, key: bytes) -> None:
        """Remove a peer behind the workers' back (as ``wg set IF peer KEY remove``)."""
        peers = dict(self.state.peers)
        del peers[key]
        self.state = replace(self.state, peers=peers)

    @property
    def peers(self) -> dict[bytes, PeerConfig]:
        """The configured peers (without their counters)."""
        return {key: peer.config() for key, peer in self.state.peers.items()}

    async def configure(self, change: DeviceChange) -> None:
        await anyio.lowlevel.checkpoint()
        if self._failures:
            self._failures -= 1
            self.failed.append(change)
            raise UapiError(f"{self._name}: configuration refused (a test said so)")
        peers = dict(self.state.peers)
        for key in change.remove:
            peers.pop(key, None)
        for peer in change.peers:
            old = peers.get(peer.public_key)
            counters = (old.last_handshake, old.rx_bytes, old.tx_bytes) if old else (None, 0, 0)
            peers[peer.public_key] = PeerState(
                peer.public_key, peer.endpoint, peer.allowed_ips, peer.keepalive, *counters
            )
        self.state = DeviceState(
            change.private_key if change.private_key is not None else self.state.private_key,
            change.listen_port if change.listen_port is not None else self.state.listen_port,
            peers,
        )
        self.changes.set((*self.changes.get_nowait(), change))

    async def read(self) -> DeviceState:
        await anyio.lowlevel.checkpoint()
        return self.state

    async def set_address(self, address: IPInterface | None) -> None:
        await anyio.lowlevel.checkpoint()
        self.address_calls += 1
        if self._address_failures:
            self._address_failures -= 1
            raise LinkError(f"{self._name}: address refused (a test said so)")
        self.address.set(address)
