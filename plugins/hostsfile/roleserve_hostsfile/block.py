"""The managed block of a hosts file, as plain functions: which nodes it lists, and how it
sits among the lines that are not ours.

::

    the last addresses ──┐
    a whole cluster_nodes view ──┼─▶ fold_addresses ─▶ Addresses {node ID → address}
    this node's own address ─────┘        │                + what it skipped, and why
                                          ▼
                                     render_block ─▶ BEGIN / "<address> <node ID>"… / END
                                          │
    the file's current bytes ─────▶ merge_block ─▶ the file's new bytes

Which nodes the block lists, as the original (Monogon's hostsfile service) decides:

- a node with an address that parses is listed with it, this node included; this node's
  own address comes from its network status (``network``) when known, which may be newer
  than its curator record;
- a node that vanishes from the view (a tombstone, a leader whose backlog lacks it) is
  KEPT with its last address: names that resolve a moment longer harm nobody, names that
  flap do. Only a node the cluster marks ``NODE_STATE_DECOMMISSIONED`` is removed;
- a node without an address, or with one that does not parse, keeps the address it had
  (if any): one bad record does not take a name away.

The block's position and everything outside it are kept byte for byte; the whole file is
compared before writing, so re-rendering the same nodes writes nothing.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from roleserve_core import common_pb2, curator_pb2, node_address
from roleserve_hostsfile.errors import MalformedBlockError

__all__ = [
    "BEGIN",
    "END",
    "Addresses",
    "Fold",
    "MalformedBlockError",
    "Skipped",
    "fold_addresses",
    "merge_block",
    "render_block",
]

BEGIN = b"# BEGIN roleserve managed block: node addresses (do not edit)"
"""The line that opens the block (a comment to every resolver)."""
END = b"# END roleserve managed block"
"""The line that closes it."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Addresses = Mapping[str, IPAddress]
"""Node ID → the address the block lists for it."""

HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
"""What a hosts file can hold as a name (node IDs are ``node-`` and hex digits): no space or
``#`` that would change what the line means."""


@dataclass(frozen=True, slots=True, order=True)
class Skipped:
    """A node the block cannot list as its record says, and why."""

    node_id: str
    value: str
    """The offending value: the address as the curator holds it, or the node ID."""
    reason: str

    def __str__(self) -> str:
        return f"{self.node_id}: {self.reason} ({self.value!r})"


@dataclass(frozen=True, slots=True)
class Fold:
    """What ``fold_addresses`` found."""

    addresses: Addresses
    """Every node the block lists, read-only."""
    skipped: tuple[Skipped, ...]
    """The nodes of the view whose address or ID cannot go into a hosts file, sorted."""


def fold_addresses(
    known: Addresses,
    nodes: Mapping[str, curator_pb2.Node],
    own_id: str,
    own_address: IPAddress | None,
) -> Fold:
    """The addresses after a whole view ``nodes``, starting from the ``known`` ones (the
    last fold's; empty at first). See the module docstring for the rules."""
    addresses = dict(known)
    skipped: list[Skipped] = []
    for node_id, node in nodes.items():
        if node.state == common_pb2.NODE_STATE_DECOMMISSIONED:
            addresses.pop(node_id, None)
            continue
        if not HOST_NAME.match(node_id):
            skipped.append(Skipped(node_id, node_id, "a node ID that is no host name"))
            continue
        try:
            address = node_address(node)
        except ValueError:
            value = node.status.external_address
            skipped.append(Skipped(node_id, value, "an address that does not parse"))
            continue
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
            value = node.status.external_address
            skipped.append(Skipped(node_id, value, "an address with a zone"))
            continue
        if address is not None:
            addresses[node_id] = address
    if own_address is not None:
        addresses[own_id] = own_address
    return Fold(MappingProxyType(addresses), tuple(sorted(skipped)))


def render_block(addresses: Addresses) -> bytes:
    """The block: its BEGIN line, ``<address> <node ID>`` per node sorted by node ID, its
    END line; each line ends with ``\\n``."""
    lines = [BEGIN]
    lines += [f"{_text(addresses[node_id])} {node_id}".encode() for node_id in sorted(addresses)]
    lines.append(END)
    return b"\n".join(lines) + b"\n"


@functools.lru_cache(maxsize=1 << 16)
def _text(address: IPAddress) -> str:
    """``str(address)``, remembered: a block is rendered whole on every change, and
    formatting an address costs more than the rest of its line."""
    return str(address)


def merge_block(current: bytes | None, block: bytes) -> bytes:
    """The file ``current`` (None: there is none) with ``block`` in place of its managed
    block, or appended if it has none (after a newline if its last line lacks one).

    Lines outside the block are kept byte for byte, line endings included. A second block
    (a copy someone pasted) is dropped, so the file has one.

    :raises MalformedBlockError: if a BEGIN line has no END line after it.
    """
    if not current:
        return block
    kept: list[bytes] = []
    placed = inside = False
    for line in current.splitlines(keepends=True):
        marker = line.rstrip()
        if inside:
            inside = marker != END
        elif marker == BEGIN:
            inside = True
            if not placed:
                kept.append(block)
                placed = True
        else:
            kept.append(line)
    if inside:
        raise MalformedBlockError(
            f"its line {BEGIN.decode()!r} has no line {END.decode()!r} after it; "
            "add it where the block ends, or remove both"
        )
    if not placed:
        if kept and not kept[-1].endswith((b"\n", b"\r")):
            kept.append(b"\n")
        kept.append(block)
    return b"".join(kept)
