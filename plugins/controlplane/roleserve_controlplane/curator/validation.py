"""Checks of what nodes and operators send, each failing with a message that says why.

The limits themselves (counts, lengths) are ``roleserve_core.limits``; a text that breaks
one is never echoed whole (``shown``): a refusal's message travels in gRPC trailers, which
clients take up to 8 KiB of.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Mapping

import grpc

from roleserve_controlplane.curator.errors import RefusedError
from roleserve_core import CUSTOM_ROLE_NAME, common_pb2
from roleserve_core.limits import (
    MAX_HANDLED_CUSTOM_ROLES,
    MAX_INSTANCE_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_LABELS,
    MAX_NODE_ID_LENGTH,
    MAX_PLUGIN_ERROR_LENGTH,
    MAX_PLUGIN_NAME_LENGTH,
    MAX_PLUGIN_STATE_LENGTH,
    MAX_PLUGINS,
    MAX_PREFIXES,
    MAX_VERSION_LENGTH,
    check_count,
    check_text,
)

__all__ = [
    "CLUSTER_NETWORK",
    "MAX_LABELS",
    "check_address",
    "check_clusternet",
    "check_instance",
    "check_labels",
    "check_node_id",
    "check_status",
    "shown",
]

CLUSTER_NETWORK: ipaddress.IPv4Network | ipaddress.IPv6Network = ipaddress.ip_network(
    "10.192.0.0/11"
)
"""The default cluster network: the prefixes nodes may announce over the WireGuard mesh
(pods), as in Monogon. A cluster's own is in its configuration (see prefixes.py)."""

_LABEL = re.compile(rf"[a-zA-Z0-9][a-zA-Z0-9_.-]{{0,{MAX_LABEL_LENGTH - 1}}}")
SHOWN = 80
"""Characters of a refused text that a message quotes."""


def _invalid(message: str) -> RefusedError:
    return RefusedError(grpc.StatusCode.INVALID_ARGUMENT, message)


def shown(text: str) -> str:
    """``repr(text)`` for a message, cut to its first ``SHOWN`` characters if longer."""
    if len(text) <= SHOWN:
        return repr(text)
    return f"{text[:SHOWN]!r}… ({len(text)} characters)"


def check_node_id(node_id: str, field: str = "node_id") -> str:
    """A node ID named in a request: not empty, at most ``MAX_NODE_ID_LENGTH``."""
    if not node_id:
        raise _invalid(f"{field} is empty; name a node")
    return check_text(field, node_id, MAX_NODE_ID_LENGTH)


def check_instance(instance: str) -> str:
    """A node process's instance ID: at most ``MAX_INSTANCE_LENGTH`` characters."""
    return check_text("instance", instance, MAX_INSTANCE_LENGTH)


def check_status(status: common_pb2.NodeStatus) -> None:
    """A node's report about itself: an IP address, a TCP port for its curator, a version,
    custom role names and plugins within the limits, a boot ID of 16 bytes or none."""
    check_address(status.external_address)
    if not 0 <= status.running_curator.port <= 65535:
        raise _invalid(f"running_curator.port {status.running_curator.port} is not a TCP port")
    check_text("version", status.version, MAX_VERSION_LENGTH)
    if len(status.boot_id) not in (0, 16):
        raise _invalid(f"boot_id is {len(status.boot_id)} bytes long; give 16 bytes or none")
    check_count("handled_custom_roles", status.handled_custom_roles, MAX_HANDLED_CUSTOM_ROLES)
    for name in status.handled_custom_roles:
        if not CUSTOM_ROLE_NAME.fullmatch(name):
            raise _invalid(f"handled_custom_roles: {shown(name)} is not a custom role name")
    check_count("plugins", status.plugins, MAX_PLUGINS)
    for index, plugin in enumerate(status.plugins):
        check_text(f"plugins[{index}].name", plugin.name, MAX_PLUGIN_NAME_LENGTH)
        check_text(f"plugins[{index}].version", plugin.version, MAX_VERSION_LENGTH)
        check_text(f"plugins[{index}].state", plugin.state, MAX_PLUGIN_STATE_LENGTH)
        check_text(f"plugins[{index}].error", plugin.error, MAX_PLUGIN_ERROR_LENGTH)


def check_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An external address: it must be an IP address."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise _invalid(f"external address {shown(text)} is not an IP address") from None
    # Python accepts an IPv6 zone ("fe80::1%eth0"), which means nothing to other nodes;
    # Go's net.ParseIP, which Monogon uses, refuses it.
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        raise _invalid(f"external address {shown(text)} has a zone; give a plain IP address")
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
                    f"label {what} {shown(text)}: use 1–{MAX_LABEL_LENGTH} characters of "
                    "letters, digits and '_.-', starting with a letter or digit"
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
    check_count("prefixes", clusternet.prefixes, MAX_PREFIXES)
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
            raise _invalid(f"prefix {shown(text)} is not in canonical CIDR form") from None
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
