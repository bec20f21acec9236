"""The consensus CA: certificates etcd members and their clients present to each other.

::

    consensus CA (one per cluster, made at bootstrap)
    ├── member certificate   CN = node ID; DNS names: node ID, ETCD_SERVER_NAME;
    │                        IP names: the member's addresses; ServerAuth + ClientAuth
    └── client certificate   CN = who (e.g. "curator:<node ID>"); ClientAuth only

Why not the cluster CA: etcd admits any client whose certificate chains to its trusted CA.
With the cluster CA, every node and user certificate of the cluster could read and write
etcd directly, around the curator. A CA of its own limits etcd to its members and the
curators (the ConsensusMember role carries this CA, as Monogon's does).

Member certificates carry IP addresses because etcd peers dial each other by the address
in their peer URLs and check it against the certificate, as any Go TLS client does. Clients
instead check the name every member certificate carries, ``ETCD_SERVER_NAME``, so that one
channel can reach any member.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from roleserve_core import write_atomically
from roleserve_core.identity import (
    Credentials,
    PrivateKey,
    PublicKey,
    certificate_from_pem,
    certificate_to_pem,
    create_ca,
    generate_key,
    issue_certificate,
    private_key_from_pem,
)

__all__ = [
    "ETCD_SERVER_NAME",
    "ConsensusCA",
    "TLSFiles",
    "read_tls_files",
    "tls_files",
    "write_tls_files",
]

ETCD_SERVER_NAME = "etcd.roleserve.invalid"
"""A DNS name of every member certificate; clients verify members against it."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class ConsensusCA:
    """The CA of one cluster's etcd members and clients."""

    key: PrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(cls) -> ConsensusCA:
        """A new CA with a new key."""
        key = generate_key()
        return cls(key, create_ca(key))

    def member_certificate(
        self, public_key: PublicKey, node_id: str, addresses: Sequence[IPAddress]
    ) -> x509.Certificate:
        """A member certificate for ``public_key``: for serving clients and peers, and for
        dialing peers."""
        return issue_certificate(
            self.key,
            self.certificate,
            public_key,
            node_id,
            server=True,
            dns_names=(node_id, ETCD_SERVER_NAME),
            ip_addresses=_with_loopback_source(addresses),
        )

    def member_credentials(
        self, node_id: str, addresses: Sequence[IPAddress], key: PrivateKey | None = None
    ) -> Credentials:
        """A member's key (``key``, or a new one) with its member certificate."""
        key = key or generate_key()
        certificate = self.member_certificate(key.public_key(), node_id, addresses)
        return Credentials(key, certificate, self.certificate)

    def client_credentials(self, name: str, key: PrivateKey | None = None) -> Credentials:
        """A client's key and certificate (client use only)."""
        key = key or generate_key()
        certificate = issue_certificate(self.key, self.certificate, key.public_key(), name)
        return Credentials(key, certificate, self.certificate)


def _with_loopback_source(addresses: Sequence[IPAddress]) -> list[IPAddress]:
    """``addresses``, plus 127.0.0.1 (or ::1) if one of them is another loopback address.

    etcd checks that a peer's certificate names the address the peer connects *from*. A
    member listening on 127.0.0.12 dials its peers from 127.0.0.1, the kernel's choice for
    loopback routes, so a certificate naming only 127.0.0.12 would be refused. This only
    concerns several members on one machine (tests, ``roleserve cluster up``).
    """
    result = list(addresses)
    for address in addresses:
        source = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
        if address.is_loopback and source not in result:
            result.append(source)
    return result


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """Where a member's TLS material lies, for etcd's flags."""

    ca: Path
    certificate: Path
    key: Path


def tls_files(directory: Path) -> TLSFiles:
    """Where a member's TLS files lie in ``directory``."""
    return TLSFiles(directory / "ca.pem", directory / "member.pem", directory / "member-key.pem")


def write_tls_files(directory: Path, credentials: Credentials) -> TLSFiles:
    """Write ``credentials`` as ``ca.pem``, ``member.pem``, ``member-key.pem`` (0600).

    The member writes them at every start, so they also keep the role's member certificate
    and consensus CA for a start while the node's roles are unknown (``saved``)."""
    if credentials.ca_certificate is None:
        raise ValueError("member credentials need the consensus CA")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = tls_files(directory)
    write_atomically(files.ca, certificate_to_pem(credentials.ca_certificate))
    write_atomically(files.certificate, credentials.certificate_pem)
    write_atomically(files.key, credentials.key_pem, 0o600)
    return files


def read_tls_files(directory: Path) -> Credentials:
    """The credentials ``write_tls_files`` wrote into ``directory``.

    :raises OSError: a file is missing or unreadable.
    :raises IdentityError: a file does not hold what it should.
    """
    files = tls_files(directory)
    return Credentials(
        private_key_from_pem(files.key.read_bytes(), str(files.key)),
        certificate_from_pem(files.certificate.read_bytes(), str(files.certificate)),
        certificate_from_pem(files.ca.read_bytes(), str(files.ca)),
    )
