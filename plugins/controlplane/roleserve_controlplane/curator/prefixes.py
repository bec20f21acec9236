"""The cluster network and the node prefixes the leader allocates from it.

::

    ClusterConfiguration.cluster_network, .node_prefix_length   set at bootstrap
          │ (empty: 10.192.0.0/11, /24: 8192 prefixes)
          ▼
    ClusterNetwork ── prefix(i): the i-th prefix ── first_free(allocated): the lowest free one
          │
          ▼
    /clusternet/prefixes/<cidr> → node ID      one key per allocated prefix, created
                                               (version == 0) in the transaction that writes
                                               the node record's cluster_prefix

A prefix is allocated when a node is approved (the first node's at bootstrap), and, when a
curator starts leading, to every approved node that lacks one (clusters made before
prefixes existed); it is freed at decommission, in the transaction that clears it from the
record. Uniqueness rests on etcd alone: the key can be created once, so two leaders racing
across a leader change cannot both give one prefix away. The lowest free prefix is chosen,
so a freed prefix is given again, but only after its key is gone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from roleserve_controlplane.proto import state_pb2
from roleserve_core import ConfigError, FinalError, RoleserveError

__all__ = [
    "DEFAULT_CLUSTER_NETWORK",
    "DEFAULT_NODE_PREFIX_LENGTH",
    "PREFIXES_PREFIX",
    "ClusterNetwork",
    "ClusterNetworkError",
    "PrefixesExhaustedError",
    "parse_network",
    "prefix_key",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_CLUSTER_NETWORK = "10.192.0.0/11"
"""The cluster network when the configuration names none, as in Monogon."""
DEFAULT_NODE_PREFIX_LENGTH = 24
"""The length of a node's prefix when the configuration names none."""
PREFIXES_PREFIX = "/clusternet/prefixes/"


class ClusterNetworkError(ConfigError, FinalError):
    """The cluster network or the node prefix length is invalid: a bootstrap with them
    cannot succeed, so it is not retried."""


class PrefixesExhaustedError(RoleserveError):
    """Every prefix of the cluster network is allocated."""


def parse_network(network: str) -> IPNetwork:
    """A cluster network alone checked: a private network in canonical CIDR form (the
    ``cluster_network`` setting's check; ``ClusterNetwork.parse`` adds the prefix length).

    :raises ClusterNetworkError: saying in one line what is wrong.
    """
    try:
        parsed = ipaddress.ip_network(network, strict=True)
    except ValueError:
        raise ClusterNetworkError(
            f"cluster network {network!r} is not a network in CIDR form (e.g. 10.192.0.0/11)"
        ) from None
    if str(parsed) != network:
        raise ClusterNetworkError(
            f"cluster network {network!r} is not in canonical form ({parsed})"
        )
    if not parsed.is_private or parsed.is_loopback or parsed.is_link_local:
        raise ClusterNetworkError(
            f"cluster network {network} is not a private network "
            "(use one of 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7)"
        )
    return parsed


def prefix_key(prefix: str) -> str:
    """The etcd key that holds the node a prefix is allocated to."""
    return PREFIXES_PREFIX + prefix


@dataclass(frozen=True)
class ClusterNetwork:
    """The network node prefixes come from, and the length of each."""

    network: IPNetwork
    prefix_length: int

    @classmethod
    def parse(
        cls,
        network: str = DEFAULT_CLUSTER_NETWORK,
        prefix_length: int = DEFAULT_NODE_PREFIX_LENGTH,
    ) -> ClusterNetwork:
        """A checked cluster network: a private network in canonical CIDR form, and a
        prefix length longer than its own.

        :raises ClusterNetworkError: saying in one line what is wrong.
        """
        parsed = parse_network(network)
        if not parsed.prefixlen < prefix_length <= parsed.max_prefixlen:
            raise ClusterNetworkError(
                f"node prefix length /{prefix_length} must be longer than the cluster "
                f"network's /{parsed.prefixlen} and at most /{parsed.max_prefixlen}"
            )
        return cls(parsed, prefix_length)

    @classmethod
    def of(cls, configuration: state_pb2.ClusterConfiguration) -> ClusterNetwork:
        """The cluster network a stored configuration names (defaults for empty fields).

        :raises ClusterNetworkError: if the stored values are invalid.
        """
        return cls.parse(
            configuration.cluster_network or DEFAULT_CLUSTER_NETWORK,
            configuration.node_prefix_length or DEFAULT_NODE_PREFIX_LENGTH,
        )

    def configure(self, configuration: state_pb2.ClusterConfiguration) -> None:
        """Write this network into ``configuration``."""
        configuration.cluster_network = str(self.network)
        configuration.node_prefix_length = self.prefix_length

    @property
    def size(self) -> int:
        """How many node prefixes the network holds."""
        return 1 << (self.prefix_length - self.network.prefixlen)

    def prefix(self, index: int) -> IPNetwork:
        """The ``index``-th node prefix (from 0)."""
        if not 0 <= index < self.size:
            raise IndexError(f"prefix {index} of {self.size}")
        step = 1 << (self.network.max_prefixlen - self.prefix_length)
        first = self.network.network_address + index * step
        return ipaddress.ip_network(f"{first}/{self.prefix_length}")

    def index(self, prefix: str) -> int | None:
        """The index of ``prefix``, or None if it is no node prefix of this network."""
        try:
            parsed = ipaddress.ip_network(prefix, strict=True)
        except ValueError:
            return None
        if parsed.version != self.network.version or parsed.prefixlen != self.prefix_length:
            return None
        if not parsed.subnet_of(self.network):  # type: ignore[arg-type]
            return None
        offset = int(parsed.network_address) - int(self.network.network_address)
        return offset >> (self.network.max_prefixlen - self.prefix_length)

    def first_free(self, allocated: Iterable[str]) -> IPNetwork:
        """The lowest prefix not in ``allocated``.

        :raises PrefixesExhaustedError: if every prefix is allocated, with the numbers.
        """
        taken = {self.index(prefix) for prefix in allocated}
        index = 0
        while index in taken:
            index += 1
        if index >= self.size:
            raise PrefixesExhaustedError(
                f"all {self.size} /{self.prefix_length} prefixes of the cluster network "
                f"{self.network} are allocated; decommission a node to free one"
            )
        return self.prefix(index)
