"""Bootstrapping a cluster: its first node, its CAs, its owner, in one etcd transaction.

::

    BootstrapMaterial.load_or_create(path)   CAs, node and member certificates, the owner's
          │                                  key and certificate; saved (0600) before etcd
          ▼                                  starts, so an interrupted bootstrap resumes
    etcd member bootstraps (member certificate from the material)
          ▼
    write_bootstrap(client, material)        one transaction, if no secrets exist yet:
                                             secrets, configuration, ticket, owner, and the
                                             first node: UP, consensus_member (its own member
                                             only) + kubernetes_controller, its address,
                                             the first prefix of the cluster network
          ▼
    material.without_ca_keys(path)           committed: the CA keys live in etcd alone; the
                                             file keeps only what a resumed bootstrap needs
          ▼
    the node is enrolled (node_credentials)  the worker deletes the file

Repeating it is harmless: the transaction writes nothing once the secrets exist, and the
material on disk is reused, so a retry after a crash finds the same CA in etcd that its
certificates chain to. Material without CA keys never writes: it only checks that etcd
holds its CA (etcd without a cluster then is an error: its data was lost after the commit).
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from roleserve_controlplane.consensus import DEFAULT_PEER_PORT, DEFAULT_RETENTION, EtcdClient
from roleserve_controlplane.curator.authority import (
    DEFAULT_NODE_CERTIFICATE_LIFETIME,
    ClusterAuthority,
)
from roleserve_controlplane.curator.health import DEFAULT_HEARTBEAT_INTERVAL
from roleserve_controlplane.curator.leader import CURATOR_PORT, peer_url
from roleserve_controlplane.curator.prefixes import ClusterNetwork, prefix_key
from roleserve_controlplane.curator.records import record_writes
from roleserve_controlplane.curator.state import (
    CONFIGURATION_KEY,
    OWNER_KEY,
    SECRETS_KEY,
    TICKET_KEY,
    ClusterState,
)
from roleserve_controlplane.proto import state_pb2
from roleserve_core import CredentialsError, common_pb2, write_atomically
from roleserve_core.identity import (
    Credentials,
    NodeCredentials,
    PrivateKey,
    UserCredentials,
    certificate_from_pem,
    certificate_to_pem,
    generate_key,
    private_key_from_pem,
    private_key_to_pem,
    public_key_der,
)

__all__ = ["OWNER_IDENTITY", "BootstrapMaterial", "write_bootstrap"]

OWNER_IDENTITY = "owner"
"""The identity of the cluster owner's user certificate."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class BootstrapMaterial:
    """Everything the first node makes before its etcd starts."""

    authority: ClusterAuthority | None
    """The CAs with their keys; None once the bootstrap committed (see ``without_ca_keys``):
    the CA certificates are then those of ``node`` and ``member``."""
    node: NodeCredentials
    """The first node's key and node certificate (and the cluster CA certificate)."""
    member: Credentials
    """The same key with its etcd member certificate (and the consensus CA certificate)."""
    owner: UserCredentials

    @property
    def ca_certificate(self) -> x509.Certificate:
        """The cluster CA certificate."""
        return self.node.ca_certificate

    @property
    def consensus_ca_pem(self) -> bytes:
        """PEM of the consensus CA certificate."""
        assert self.member.ca_certificate is not None  # always given, by create and load
        return certificate_to_pem(self.member.ca_certificate)

    def without_ca_keys(self, path: Path) -> BootstrapMaterial:
        """This material without the CAs' private keys, saved at ``path`` (0600) over the
        full one. Call it once the bootstrap transaction committed: the keys are in etcd
        then, and the one copy on a node's disk would outlive its purpose."""
        stripped = dataclasses.replace(self, authority=None)
        write_atomically(path, stripped.to_proto().SerializeToString(), 0o600)
        return stripped

    @classmethod
    def create(
        cls,
        node_key: PrivateKey,
        address: IPAddress,
        owner_identity: str = OWNER_IDENTITY,
        lifetime: datetime.timedelta = DEFAULT_NODE_CERTIFICATE_LIFETIME,
    ) -> BootstrapMaterial:
        """New CAs and certificates for the node with ``node_key`` at ``address``; its node
        certificate is valid for ``lifetime`` (the cluster's node certificate lifetime)."""
        authority = ClusterAuthority.create()
        node = NodeCredentials(
            node_key,
            authority.node_certificate(node_key.public_key(), lifetime),
            authority.ca_certificate,
        )
        member = Credentials(
            node_key,
            authority.member_certificate(node_key.public_key(), node.node_id, [address]),
            authority.consensus.certificate,
        )
        owner_key = generate_key()
        owner = UserCredentials(
            owner_key,
            authority.user_certificate(owner_key.public_key(), owner_identity),
            authority.ca_certificate,
        )
        return cls(authority, node, member, owner)

    @classmethod
    def load_or_create(
        cls,
        path: Path,
        node_key: PrivateKey,
        address: IPAddress,
        lifetime: datetime.timedelta = DEFAULT_NODE_CERTIFICATE_LIFETIME,
    ) -> BootstrapMaterial:
        """The material saved at ``path``, or new material saved there (0600), with a node
        certificate valid for ``lifetime``.

        :raises CredentialsError: if the saved material is corrupt or of another node key.
        """
        if not path.exists():
            material = cls.create(node_key, address, lifetime=lifetime)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomically(path, material.to_proto().SerializeToString(), 0o600)
            return material
        stored = state_pb2.BootstrapMaterial()
        try:
            stored.ParseFromString(path.read_bytes())
            material = cls.from_proto(stored)
        except Exception as exc:
            raise CredentialsError(f"{path}: corrupt bootstrap material ({exc})") from None
        if public_key_der(material.node.key.public_key()) != public_key_der(node_key.public_key()):
            raise CredentialsError(f"{path}: bootstrap material of another node key")
        return material

    def to_proto(self) -> state_pb2.BootstrapMaterial:
        """The record saved on disk."""
        return state_pb2.BootstrapMaterial(
            secrets=self._secrets(),
            node_key=private_key_to_pem(self.node.key),
            node_certificate=self.node.certificate_pem,
            member_certificate=self.member.certificate_pem,
            owner_key=private_key_to_pem(self.owner.key),
            owner_certificate=self.owner.certificate_pem,
            owner_identity=self.owner.identity,
        )

    def _secrets(self) -> state_pb2.ClusterSecrets:
        """The CAs: with their keys while there is an authority, else certificates only."""
        if self.authority is not None:
            return self.authority.secrets()
        return state_pb2.ClusterSecrets(
            ca_certificate=certificate_to_pem(self.ca_certificate),
            consensus_ca_certificate=self.consensus_ca_pem,
        )

    @classmethod
    def from_proto(cls, stored: state_pb2.BootstrapMaterial) -> BootstrapMaterial:
        """The material a record holds (checked: keys and certificates must match).

        A record without CA keys (``without_ca_keys``) gives material without authority.
        """
        secrets = stored.secrets
        authority = None
        if secrets.ca_key or secrets.consensus_ca_key:
            authority = ClusterAuthority.from_secrets(secrets)
        ca = certificate_from_pem(secrets.ca_certificate, "the cluster CA certificate")
        consensus_ca = certificate_from_pem(
            secrets.consensus_ca_certificate, "the consensus CA certificate"
        )
        key = private_key_from_pem(stored.node_key, "the node key")
        owner_key = private_key_from_pem(stored.owner_key, "the owner key")
        return cls(
            authority,
            NodeCredentials(key, certificate_from_pem(stored.node_certificate), ca),
            Credentials(key, certificate_from_pem(stored.member_certificate), consensus_ca),
            UserCredentials(owner_key, certificate_from_pem(stored.owner_certificate), ca),
        )

    def first_node(
        self, address: IPAddress, network: ClusterNetwork | None = None
    ) -> state_pb2.NodeRecord:
        """The first node's record: UP, consensus member and Kubernetes controller, with
        the first prefix of ``network`` (the default cluster network if None)."""
        record = state_pb2.NodeRecord(
            id=self.node.node_id,
            public_key=public_key_der(self.node.key.public_key()),
            state=common_pb2.NODE_STATE_UP,
            certificate=self.node.certificate_pem,
            cluster_prefix=str((network or ClusterNetwork.parse()).prefix(0)),
        )
        member = record.roles.consensus_member
        member.ca_certificate = self.consensus_ca_pem
        member.peer_certificate = self.member.certificate_pem
        member.peers.add(name=self.node.node_id, url=peer_url(str(address), DEFAULT_PEER_PORT))
        record.roles.kubernetes_controller.SetInParent()
        record.status.external_address = str(address)
        record.status.running_curator.port = CURATOR_PORT
        return record


async def write_bootstrap(
    client: EtcdClient,
    material: BootstrapMaterial,
    address: IPAddress,
    *,
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
    network: ClusterNetwork | None = None,
    node_certificate_lifetime: datetime.timedelta = DEFAULT_NODE_CERTIFICATE_LIFETIME,
    history_retention: float = DEFAULT_RETENTION,
) -> bool:
    """Write the new cluster's records in one transaction; False if it already has them.

    ``network`` is the cluster network (default 10.192.0.0/11, /24 per node); it is kept in
    the configuration, and the first node gets its first prefix. So is
    ``node_certificate_lifetime``, the validity of every node certificate the curator issues,
    and ``history_retention``, the seconds of etcd history the leading curator keeps.

    :raises CredentialsError: if the cluster in etcd has another CA than ``material``, or
        none while the material holds no CA keys (the bootstrap committed, and etcd's data
        was lost since).
    """
    if material.authority is None:
        await _check_committed(ClusterState(client), material)
        return False
    configuration = state_pb2.ClusterConfiguration()
    configuration.heartbeat_interval.FromNanoseconds(int(heartbeat_interval * 1e9))
    configuration.node_certificate_lifetime.FromTimedelta(node_certificate_lifetime)
    configuration.history_retention.FromNanoseconds(int(history_retention * 1e9))
    network = network or ClusterNetwork.parse()
    network.configure(configuration)
    owner = state_pb2.OwnerRecord(
        identity=material.owner.identity, certificate=material.owner.certificate_pem
    )
    first = material.first_node(address, network)
    state = ClusterState(client)
    written = await state.initialise(
        [
            (SECRETS_KEY, material.authority.secrets().SerializeToString()),
            (CONFIGURATION_KEY, configuration.SerializeToString()),
            (TICKET_KEY, secrets.token_bytes(32)),
            (OWNER_KEY, owner.SerializeToString()),
            *record_writes(first),
            (prefix_key(first.cluster_prefix), first.id.encode()),
        ]
    )
    if not written:
        await _check_committed(state, material)
    return written


async def _check_committed(state: ClusterState, material: BootstrapMaterial) -> None:
    """Check that etcd holds the cluster of ``material``."""
    stored = await state.secrets()
    if stored is None:
        raise CredentialsError(
            "this bootstrap committed (its material holds no CA keys any more), but etcd "
            "holds no cluster: the member's data was lost; bootstrap anew from an empty "
            "data directory"
        )
    if stored.ca_certificate != certificate_to_pem(material.ca_certificate):
        raise CredentialsError("etcd holds another cluster than this bootstrap material")
