"""The cluster's two CAs, as the curator uses them to issue certificates.

The cluster CA issues node and user certificates (the gRPC identities); the consensus CA
issues etcd member certificates. Both keys live in etcd (``ClusterSecrets``), which only
curators reach, through etcd's mutual TLS with the consensus CA.

Node certificates are valid for the cluster's ``node_certificate_lifetime`` (cluster
configuration; 30 days when unset, as in clusters bootstrapped before the field existed):
a node renews its own after two thirds of it (``RenewCertificate``), so a decommissioned
node, which may no longer renew, holds a certificate that stops opening anything within one
lifetime. User certificates and the CAs keep their ten years.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509

from roleserve_controlplane.consensus import ConsensusCA
from roleserve_controlplane.proto import state_pb2
from roleserve_core.identity import (
    CLOCK_SKEW,
    PrivateKey,
    PublicKey,
    Scope,
    certificate_from_pem,
    certificate_to_pem,
    create_ca,
    generate_key,
    issue_node_certificate,
    issue_user_certificate,
    private_key_from_pem,
    private_key_to_pem,
)

__all__ = ["DEFAULT_NODE_CERTIFICATE_LIFETIME", "ClusterAuthority", "node_certificate_lifetime"]

DEFAULT_NODE_CERTIFICATE_LIFETIME = datetime.timedelta(days=30)
"""How long a node certificate is valid when the cluster configuration does not say."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class ClusterAuthority:
    """The cluster CA and the consensus CA, with their keys."""

    ca_key: PrivateKey
    ca_certificate: x509.Certificate
    consensus: ConsensusCA

    @classmethod
    def create(cls) -> ClusterAuthority:
        """Two new CAs with new keys (at bootstrap)."""
        key = generate_key()
        return cls(key, create_ca(key), ConsensusCA.create())

    @classmethod
    def from_secrets(cls, secrets: state_pb2.ClusterSecrets) -> ClusterAuthority:
        """The CAs stored in ``secrets``."""
        return cls(
            private_key_from_pem(secrets.ca_key, "the cluster CA key"),
            certificate_from_pem(secrets.ca_certificate, "the cluster CA certificate"),
            ConsensusCA(
                private_key_from_pem(secrets.consensus_ca_key, "the consensus CA key"),
                certificate_from_pem(
                    secrets.consensus_ca_certificate, "the consensus CA certificate"
                ),
            ),
        )

    def secrets(self) -> state_pb2.ClusterSecrets:
        """The record stored in etcd."""
        return state_pb2.ClusterSecrets(
            ca_certificate=certificate_to_pem(self.ca_certificate),
            ca_key=private_key_to_pem(self.ca_key),
            consensus_ca_certificate=certificate_to_pem(self.consensus.certificate),
            consensus_ca_key=private_key_to_pem(self.consensus.key),
        )

    @property
    def ca_pem(self) -> bytes:
        """PEM of the cluster CA certificate."""
        return certificate_to_pem(self.ca_certificate)

    @property
    def consensus_ca_pem(self) -> bytes:
        """PEM of the consensus CA certificate."""
        return certificate_to_pem(self.consensus.certificate)

    def node_certificate(
        self,
        public_key: PublicKey,
        lifetime: datetime.timedelta = DEFAULT_NODE_CERTIFICATE_LIFETIME,
    ) -> x509.Certificate:
        """A node certificate for ``public_key``, valid for ``lifetime`` from now.

        Its start is backdated for peers whose clock lags, by ``CLOCK_SKEW`` but at most a
        tenth of ``lifetime``: the node renews after two thirds of the certificate's whole
        validity, which a 5 min backdate would put in the past for a lifetime under 15 min
        (test clusters), and the node would renew at once, again and again.
        """
        now = datetime.datetime.now(datetime.UTC)
        start = now - min(CLOCK_SKEW, lifetime / 10)
        return issue_node_certificate(
            self.ca_key, self.ca_certificate, public_key, not_before=start, not_after=now + lifetime
        )

    def user_certificate(
        self, public_key: PublicKey, identity: str, scope: Scope | None = None
    ) -> x509.Certificate:
        """A user certificate for ``public_key``, named ``identity``; with ``scope`` in its
        scope extension (None: no extension, an owner's, as bootstrap issues)."""
        return issue_user_certificate(
            self.ca_key, self.ca_certificate, public_key, identity, scope=scope
        )

    def member_certificate(
        self, public_key: PublicKey, node_id: str, addresses: Sequence[IPAddress]
    ) -> x509.Certificate:
        """An etcd member certificate for a node's key (the node keeps its key; the
        certificate travels in its ConsensusMember role)."""
        return self.consensus.member_certificate(public_key, node_id, addresses)


def node_certificate_lifetime(configuration: state_pb2.ClusterConfiguration) -> datetime.timedelta:
    """The lifetime of node certificates in ``configuration``; the default when unset."""
    if not configuration.HasField("node_certificate_lifetime"):
        return DEFAULT_NODE_CERTIFICATE_LIFETIME
    return configuration.node_certificate_lifetime.ToTimedelta()
