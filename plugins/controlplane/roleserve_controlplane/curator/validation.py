"""Checks of what nodes and operators send, each failing with a message that says why."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Mapping

import grpc

from roleserve_controlplane.curator.errors import RefusedError
from roleserve_core.proto import common_pb2

__all__ = [
    "CLUSTER_NETWORK",
    "MAX_LABELS",
    "check_address",
    "check_clusternet",
    "check_labels",
]

CLUSTER_NETWORK: ipaddress.IPv4Network | ipaddress.IPv6Network = ipaddress.ip_network(
    "10.192.0.0/11"
)
"""The default cluster network: the prefixes nodes may announce over the WireGuard mesh
(pods), as in Monogon. A cluster's own is in its configuration (see prefixes.py)."""

MAX_LABELS = 128
_LABEL = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}")


def _invalid(message: str) -> RefusedError:
    return RefusedError(grpc.StatusCode.INVALID_ARGUMENT, message)


def check_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An external address: it must be an IP address."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise _invalid(f"external address {text!r} is not an IP address") from None
    # Python accepts an IPv6 zone ("fe80::1%eth0"), which means nothing to other nodes;
    # Go's net.ParseIP, which Monogon uses, refuses it.
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        raise _invalid(f"external address {text!r} has a zone; give a plain IP address")
    return address


def check_labels(labels: common_pb2.NodeLabels) -> None:
    """At most 128 labels, keys and values of 1–63 characters of [a-zA-Z0-9_.-] starting
    with a letter or digit, no key twice."""
    if len(labels.pairs) > MAX_LABELS:
        raise _invalid(f"{len(labels.pairs)} labels; a node has at most {MAX_LABELS}")
    seen: set[str] = set()
    for pair in labels.pairs:
        for what, text in (("key", pair.key), ("value", pair.value)):
            if not _LABEL.fullmatch(text):
                raise _invalid(
                    f"label {what} {text!r}: use 1–63 characters of letters, digits and "
                    "'_.-', starting with a letter or digit"
                )
        if pair.key in seen:
            raise _invalid(f"label {pair.key!r} is given twice")
        seen.add(pair.key)


def check_clusternet(
    clusternet: common_pb2.NodeClusterNetworking,
    own_address: str,
    keys_of_others: set[str],
    *,
    network: ipaddress.IPv4Network | ipaddress.IPv6Network = CLUSTER_NETWORK,
    own_prefix: str = "",
    allocated: Mapping[str, str] | None = None,
) -> None:
    """A WireGuard key (base64 of 32 bytes) no other node uses, and prefixes in canonical
    form that are the /32 (/128) of the node's own address, inside its allocated
    ``own_prefix``, or inside the cluster ``network`` without overlapping a prefix
    ``allocated`` (prefix → node ID) to another node: a node may not take traffic meant
    for another's prefix."""
    try:
        key = base64.b64decode(clusternet.wireguard_pubkey, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise _invalid("wireguard_pubkey must be the base64 of a 32-byte WireGuard key")
    # The duplicate check below compares texts: refuse the other encodings of a key (base64
    # of 32 bytes leaves 2 spare bits), or a node could reuse another node's key.
    if base64.b64encode(key).decode() != clusternet.wireguard_pubkey:
        raise _invalid("wireguard_pubkey is not in canonical base64 (the spare bits are set)")
    if clusternet.wireguard_pubkey in keys_of_others:
        raise RefusedError(
            grpc.StatusCode.ALREADY_EXISTS, "another node already uses this WireGuard key"
        )
    own = ipaddress.ip_network(own_address) if own_address else None
    mine = ipaddress.ip_network(own_prefix) if own_prefix else None
    others = [
        (ipaddress.ip_network(prefix), node)
        for prefix, node in (allocated or {}).items()
        if prefix != own_prefix
    ]
    for text in clusternet.prefixes:
        try:
            prefix = ipaddress.ip_network(text, strict=True)
        except ValueError:
            raise _invalid(f"prefix {text!r} is not in canonical CIDR form") from None
        if str(prefix) != text:
            raise _invalid(f"prefix {text!r} is not in canonical form ({prefix})")
        if prefix == own or (mine is not None and _inside(prefix, mine)):
            continue
        if not _inside(prefix, network):
            raise _invalid(f"prefix {text} is neither inside {network} nor this node's own address")
        for other, node in others:
            if prefix.version == other.version and prefix.overlaps(other):
                raise _invalid(f"prefix {text} overlaps {other}, the prefix of node {node}")


def _inside(
    prefix: ipaddress.IPv4Network | ipaddress.IPv6Network,
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> bool:
    return prefix.version == network.version and prefix.subnet_of(network)  # type: ignore[arg-type]
