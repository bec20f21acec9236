"""The value the plugin owns: ``clusternet_status``, what the mesh looks like from here.

Set by the reconcile runnable after each pass (so at least every ``reconcile_interval``),
from what the interface reports over UAPI; ``ClusternetStatus.NONE`` while the interface is
not up (before the first pass, after the worker stopped or failed). ``roleserve ctl
values`` shows its ``repr``, a one-line summary; ``roleserve ctl values NODE
clusternet_status`` its ``details()``, every peer with its last handshake and bytes.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import ClassVar

from roleserve_core import ValueKey

__all__ = ["CLUSTERNET_STATUS", "ClusternetStatus", "PeerStatus"]


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """One peer as the interface reports it."""

    node_id: str
    """The node it belongs to; ``""`` for a peer no node claims (removed at the next pass)."""
    public_key: str
    """Base64."""
    endpoint: str | None
    allowed_ips: tuple[str, ...]
    last_handshake: float | None
    """Seconds since the epoch of the last handshake; None: never."""
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True, slots=True)
class ClusternetStatus:
    """The interface and its peers; ``NONE`` (interface ``""``) while it is not up."""

    interface: str
    public_key: str
    listen_port: int
    prefixes: tuple[str, ...]
    """What this node announces (its address in its cluster prefix, its pod prefixes)."""
    peers: tuple[PeerStatus, ...]
    """By node ID."""

    NONE: ClassVar[ClusternetStatus]

    @property
    def up(self) -> bool:
        return bool(self.interface)

    def __repr__(self) -> str:
        if not self.up:
            return "ClusternetStatus(not up)"
        handshaken = sum(peer.last_handshake is not None for peer in self.peers)
        return (
            f"ClusternetStatus({self.interface} port {self.listen_port}, key "
            f"{self.public_key[:8]}…, announcing {', '.join(self.prefixes) or 'nothing'}; "
            f"{len(self.peers)} peers, {handshaken} with a handshake)"
        )

    def details(self) -> str:
        """Every field, a peer a line: what ``roleserve ctl values NODE clusternet_status``
        shows."""
        if not self.up:
            return "the interface is not up"
        lines = [
            f"interface {self.interface}, UDP port {self.listen_port}",
            f"public key {self.public_key}",
            f"announcing {', '.join(self.prefixes) or 'nothing'}",
            f"{len(self.peers)} peers:",
        ]
        now = time.time()
        for peer in self.peers:
            handshake = (
                "never"
                if peer.last_handshake is None
                else f"{max(0.0, now - peer.last_handshake):.0f}s ago"
            )
            lines.append(
                f"  {peer.node_id or '(no node)'}  {peer.public_key}  at {peer.endpoint or '-'}"
                f"  allowed {', '.join(peer.allowed_ips) or '-'}  handshake {handshake}"
                f"  rx {peer.rx_bytes} B  tx {peer.tx_bytes} B"
            )
        return "\n".join(lines)


ClusternetStatus.NONE = ClusternetStatus("", "", 0, (), ())


def key_text(key: bytes) -> str:
    return base64.b64encode(key).decode()


CLUSTERNET_STATUS: ValueKey[ClusternetStatus] = ValueKey(
    "clusternet_status",
    ClusternetStatus,
    "The WireGuard mesh interface, its key, port, announced prefixes and each peer's "
    "endpoint, allowed IPs, last handshake and bytes; NONE while the interface is not up.",
)
