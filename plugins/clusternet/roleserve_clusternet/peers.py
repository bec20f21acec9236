"""Which peers the node wants, from the cluster's nodes; and what to change to get there.

Plain functions of their inputs, so that the decisions are tested without an interface:

::

    cluster_nodes ──wanted_peers──▶ Wanted { public key → PeerConfig, skipped nodes }
    (what is, what is wanted) ──plan──▶ DeviceChange (peers to set, keys to remove)
    own record's cluster_prefix ──own_address──▶ the node's address on the interface

Which nodes are peers: every other node whose record has a valid WireGuard key, unless it
is decommissioned. Its endpoint is its external address at the listen port, its allowed IPs
the prefixes it announced (``clusternet.prefixes``), compared by value (Monogon compares
its slices by pointer, so every node with a prefix counted as changed on every update).
A node whose key, prefixes or address do not parse is skipped, with its reason (the
worker logs each distinct one once); it never takes the interface down for the others,
and neither does a node that claims this node's key or another node's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, replace

from roleserve_clusternet.device import (
    DeviceChange,
    IPInterface,
    IPNetwork,
    PeerConfig,
    parse_network,
    sorted_networks,
)
from roleserve_clusternet.privatekey import decode_key
from roleserve_core import common_pb2, curator_pb2, endpoint, node_address

__all__ = ["Skipped", "Wanted", "announced", "own_address", "plan", "wanted_peers"]


@dataclass(frozen=True, slots=True)
class Skipped:
    """A node left out of the peers, and why."""

    node_id: str
    reason: str

    def __str__(self) -> str:
        return f"{self.node_id}: {self.reason}"


@dataclass(frozen=True)
class Wanted:
    """The peers the node wants, and the nodes it skipped."""

    peers: Mapping[bytes, PeerConfig]
    """Public key → peer."""
    nodes: Mapping[bytes, str]
    """Public key → the node ID it belongs to (for the status value and log lines)."""
    skipped: tuple[Skipped, ...] = ()


def wanted_peers(
    view: Mapping[str, curator_pb2.Node],
    own_id: str,
    own_key: bytes,
    *,
    port: int,
    keepalive: int,
) -> Wanted:
    """The peers ``view`` asks for; see the module docstring. Nodes in node ID order: of two
    nodes claiming one key, the first keeps it."""
    peers: dict[bytes, PeerConfig] = {}
    nodes: dict[bytes, str] = {}
    skipped: list[Skipped] = []
    for node_id in sorted(view):
        record = view[node_id]
        if node_id == own_id or record.state == common_pb2.NODE_STATE_DECOMMISSIONED:
            continue
        text = record.clusternet.wireguard_pubkey
        if not text:
            continue  # it has not announced itself yet
        try:
            key = decode_key(text)
        except ValueError as exc:
            skipped.append(
                Skipped(node_id, f"a WireGuard key that does not parse ({exc}): {text!r}")
            )
            continue
        if key == own_key:
            skipped.append(Skipped(node_id, f"this node's own WireGuard key {text}"))
            continue
        if key in nodes:
            skipped.append(Skipped(node_id, f"the WireGuard key {text} of {nodes[key]}"))
            continue
        networks: list[IPNetwork] = []
        bad = [p for p in record.clusternet.prefixes if not _parse(p, networks)]
        if bad:
            skipped.append(Skipped(node_id, f"a prefix that does not parse: {bad[0]!r}"))
            continue
        try:
            address = node_address(record)
        except ValueError:
            address_text = record.status.external_address
            skipped.append(Skipped(node_id, f"an address that does not parse: {address_text!r}"))
            continue
        where = endpoint(address, port) if address is not None else None
        peers[key] = PeerConfig(key, where, sorted_networks(networks), keepalive)
        nodes[key] = node_id
    return Wanted(peers, nodes, tuple(skipped))


def _parse(text: str, into: list[IPNetwork]) -> bool:
    try:
        into.append(parse_network(text))
    except ValueError:
        return False
    return True


def plan(current: Mapping[bytes, PeerConfig], wanted: Mapping[bytes, PeerConfig]) -> DeviceChange:
    """The change that turns the peers ``current`` into ``wanted``: each peer that is
    missing or differs set whole, each peer not wanted removed; by key, for a stable order.

    A wanted endpoint replaces one WireGuard learnt from the peer's packets (a peer behind
    NAT is reached at its announced address again at each pass); none is set for a peer
    whose node has no address.
    """
    changed = tuple(
        wanted[key] for key in sorted(wanted) if not _same(current.get(key), wanted[key])
    )
    removed = tuple(key for key in sorted(current) if key not in wanted)
    return DeviceChange(peers=changed, remove=removed)


def _same(current: PeerConfig | None, wanted: PeerConfig) -> bool:
    """Whether ``current`` is ``wanted``. A peer wanted without an endpoint (its node has
    no address) keeps whatever endpoint WireGuard learnt from its packets."""
    if current is not None and wanted.endpoint is None:
        current = replace(current, endpoint=None)
    return current == wanted


def own_address(record: curator_pb2.Node | None) -> IPInterface | None:
    """The node's address on the interface: the first host address of its
    ``cluster_prefix``, alone (/32 or /128); None while it has no prefix.

    :raises ValueError: a prefix that does not parse.
    """
    if record is None or not record.cluster_prefix:
        return None
    network = ipaddress.ip_network(record.cluster_prefix)
    first = next(iter(network.hosts()), network.network_address)
    return ipaddress.ip_interface(f"{first}/{network.max_prefixlen}")


def announced(address: IPInterface, pod_prefixes: tuple[IPNetwork, ...] = ()) -> list[str]:
    """What the node announces to the curator: its own address alone and its pod prefixes,
    without duplicates, in ``sorted_networks`` order, in canonical CIDR form."""
    return [str(n) for n in sorted_networks([address.network, *pod_prefixes])]
