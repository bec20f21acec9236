"""The Kubernetes PKI: the certificates and keys of one cluster's Kubernetes, kept in etcd.

CONTRACT (the launch plans are written against it)::

    /kubernetes/pki/<name>   in etcd, one key per entry of STORED_NAMES (PKI_NAMES but
                             ``apiserver``), all created in one transaction by the first
                             controller, only if none exists (create_revision == 0); the
                             loser of a race reads the winner's; every later one reads them

    ca                       the cluster's Kubernetes CA (signs everything below but the
                             front-proxy client and the service-account pair)
    front-proxy-ca           the CA of the aggregation layer's front proxy
    front-proxy-client       client certificate of the apiserver to aggregated servers
    service-account          key pair signing service-account tokens (no certificate)
    apiserver                serving certificate of kube-apiserver: per controller, issued
                             from ``ca`` at each start, never stored (see below)
    apiserver-kubelet-client client certificate of kube-apiserver to kubelets
    controller-manager       client certificate of kube-controller-manager
    scheduler                client certificate of kube-scheduler
    admin                    client certificate of the cluster's admin (O=system:masters)

    controller_pki(etcd, node_id, addresses) ──▶ load_or_create_pki(etcd) + apiserver_serving()
                                             ──▶ {name: KeyPair} for every PKI_NAMES entry

Why ``apiserver`` is per controller: its certificate must name the controller's own
addresses (clients dial a controller's address, and kubelets reach the apiserver at it),
and those differ per controller and may change. One shared certificate would have to name
every controller's address, be reissued (in etcd, racing the others) each time a controller
is added or moves, and would let any controller's key impersonate the others. Issuing it
from ``ca`` at each start costs a millisecond and never goes stale; its key never leaves
the controller. Stored entries are the ones every controller must agree on.

How a controller reaches etcd: the controlplane worker publishes, in
``local_control_plane``, the local member's client endpoint and the credentials it may act
as a client with (``LocalControlPlane.etcd_credentials``: the member's key and certificate
and the consensus CA, the only CA etcd admits); ``etcd_client(local_control_plane)`` makes
an ``EtcdClient`` of them. The controller role requires ``consensus_member``, so a
controller always has a local member, and nothing else needs to hand out etcd credentials.

Per-node certificates (a kubelet's client and serving certificate) are not stored either:
the curator issues them from ``ca`` to the node that asks (``service``), and an admin's
client certificate to a user (``roleserve ctl kubeconfig``).

Names and usages are what Kubernetes checks: a client's user is its CN and its groups its
O attributes (``system:masters`` is the cluster-admin group, ``system:nodes`` the nodes'
for the Node authorizer); client certificates carry ClientAuth, serving ones ServerAuth
and the names clients dial. Every key is ECDSA P-256 (Kubernetes accepts it for TLS and
signs service-account tokens with it as ES256).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography import x509

from roleserve_core import FinalError, IdentityError, LocalControlPlane
from roleserve_core.identity import (
    PrivateKey,
    PublicKey,
    certificate_from_pem,
    certificate_to_pem,
    create_ca,
    generate_key,
    issue_certificate,
    private_key_from_pem,
    private_key_to_pem,
)

if TYPE_CHECKING:
    from roleserve_controlplane import EtcdClient

__all__ = [
    "ADMIN_GROUP",
    "NODES_GROUP",
    "PKI_NAMES",
    "PKI_PREFIX",
    "SERVICE_IP",
    "SERVICE_NAMES",
    "STORED_NAMES",
    "KeyPair",
    "KubernetesPKIError",
    "admin_certificate",
    "apiserver_serving",
    "controller_pki",
    "etcd_client",
    "generate_pki",
    "kubelet_client_certificate",
    "kubelet_serving_certificate",
    "load_or_create_pki",
    "node_user",
]

PKI_PREFIX = "/kubernetes/pki/"
"""The etcd prefix of the PKI's entries."""

PKI_NAMES = (
    "ca",
    "front-proxy-ca",
    "front-proxy-client",
    "service-account",
    "apiserver",
    "apiserver-kubelet-client",
    "controller-manager",
    "scheduler",
    "admin",
)
"""Every entry of the PKI, in the order they are made."""

STORED_NAMES = tuple(name for name in PKI_NAMES if name != "apiserver")
"""The entries kept in etcd: all but ``apiserver``, which each controller issues itself."""

SERVICE_IP = ipaddress.IPv4Address("10.224.0.1")
"""The first address of the service range (Monogon's 10.224.0.1/16): the ``kubernetes``
service, which pods reach the apiserver at."""

SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
"""The DNS names of the ``kubernetes`` service (cluster domain ``cluster.local``)."""

ADMIN_GROUP = "system:masters"
"""The group Kubernetes grants everything to, without RBAC."""
NODES_GROUP = "system:nodes"
"""The group of kubelets (the Node authorizer and its admission plugin)."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class KubernetesPKIError(FinalError):
    """The Kubernetes PKI in etcd is incomplete or corrupt: restarting cannot fix it."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """One entry of the PKI: a private key and, except for ``service-account``, its
    certificate; both PEM."""

    key_pem: bytes
    certificate_pem: bytes | None

    @classmethod
    def of(cls, key: PrivateKey, certificate: x509.Certificate | None) -> KeyPair:
        """The PEM pair of ``key`` and ``certificate``."""
        pem = certificate_to_pem(certificate) if certificate is not None else None
        return cls(private_key_to_pem(key), pem)

    @property
    def key(self) -> PrivateKey:
        """The parsed private key."""
        return private_key_from_pem(self.key_pem, "a Kubernetes PKI key")

    @property
    def certificate(self) -> x509.Certificate:
        """The parsed certificate (``service-account`` has none: ValueError)."""
        if self.certificate_pem is None:
            raise ValueError("this entry is a key pair without a certificate")
        return certificate_from_pem(self.certificate_pem, "a Kubernetes PKI certificate")

    def to_json(self) -> bytes:
        """What etcd stores: ``{"key": PEM, "certificate": PEM or null}``."""
        certificate = self.certificate_pem.decode() if self.certificate_pem is not None else None
        return json.dumps({"key": self.key_pem.decode(), "certificate": certificate}).encode()

    @classmethod
    def from_json(cls, data: bytes, what: str) -> KeyPair:
        """Parse what ``to_json`` wrote, checking that key and certificate parse and match.

        :raises KubernetesPKIError: naming ``what`` (the etcd key).
        """
        try:
            record = json.loads(data)
            certificate = record["certificate"]
            pair = cls(
                record["key"].encode(), None if certificate is None else certificate.encode()
            )
            key = pair.key
            certified = pair.certificate_pem is not None
            if certified and pair.certificate.public_key() != key.public_key():
                raise ValueError("its certificate is not of its key")
        except (ValueError, KeyError, TypeError, AttributeError, IdentityError) as exc:
            raise KubernetesPKIError(f"{what} in etcd is corrupt ({exc}); {_REMAKE}") from None
        return pair


_REMAKE = (
    f"delete every key under {PKI_PREFIX} (etcdctl del --prefix {PKI_PREFIX}) to make a new "
    "PKI, then restart the controllers and kubelets: every certificate of the old one stops "
    "working"
)


# -- issuing ------------------------------------------------------------------------


def _client(ca: KeyPair, common_name: str, organizations: Sequence[str] = ()) -> KeyPair:
    """A new key and a ClientAuth certificate for it, issued by ``ca``."""
    key = generate_key()
    return KeyPair.of(key, _issue(ca, key.public_key(), common_name, organizations))


def _issue(
    ca: KeyPair,
    public_key: PublicKey,
    common_name: str,
    organizations: Sequence[str] = (),
    *,
    names: tuple[Sequence[str], Sequence[IPAddress]] | None = None,
    not_after: datetime.datetime | None = None,
) -> x509.Certificate:
    """A certificate of ``ca``: a client's, or with ``names`` (DNS, IP) a server's."""
    dns_names, ip_addresses = names or ((), ())
    return issue_certificate(
        ca.key,
        ca.certificate,
        public_key,
        common_name,
        server=names is not None,
        client=names is None,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        organizations=organizations,
        not_after=not_after,
    )


def _ca(common_name: str) -> KeyPair:
    key = generate_key()
    return KeyPair.of(key, create_ca(key, common_name=common_name))


def generate_pki() -> dict[str, KeyPair]:
    """A new PKI: every entry of ``STORED_NAMES``."""
    ca = _ca("kubernetes")
    front_proxy_ca = _ca("front-proxy-ca")
    return {
        "ca": ca,
        "front-proxy-ca": front_proxy_ca,
        "front-proxy-client": _client(front_proxy_ca, "front-proxy-client"),
        "service-account": KeyPair.of(generate_key(), None),
        "apiserver-kubelet-client": _client(ca, "kube-apiserver-kubelet-client", [ADMIN_GROUP]),
        "controller-manager": _client(ca, "system:kube-controller-manager"),
        "scheduler": _client(ca, "system:kube-scheduler"),
        "admin": _client(ca, "kubernetes-admin", [ADMIN_GROUP]),
    }


def apiserver_serving(
    pki: Mapping[str, KeyPair], node_id: str, addresses: Iterable[IPAddress]
) -> KeyPair:
    """The serving certificate of this controller's kube-apiserver, with a new key: the
    service's names and address, the node's ID and ``addresses`` (see the module doc), and
    ``localhost``/127.0.0.1 for the controller-manager and scheduler beside it."""
    key = generate_key()
    certificate = _issue(
        pki["ca"],
        key.public_key(),
        "kube-apiserver",
        names=(
            (*SERVICE_NAMES, node_id, "localhost"),
            _unique([SERVICE_IP, ipaddress.IPv4Address("127.0.0.1"), *addresses]),
        ),
    )
    return KeyPair.of(key, certificate)


def node_user(node_id: str) -> str:
    """The Kubernetes user of a node's kubelet: ``system:node:<node id>``, which the Node
    authorizer requires."""
    return f"system:node:{node_id}"


def kubelet_client_certificate(
    pki: Mapping[str, KeyPair], node_id: str, public_key: PublicKey
) -> x509.Certificate:
    """The kubelet's client certificate of ``node_id``: CN system:node:<id>, O system:nodes."""
    return _issue(pki["ca"], public_key, node_user(node_id), [NODES_GROUP])


PROXY_USER = "system:kube-proxy"
"""kube-proxy's user: Kubernetes' default ClusterRoleBinding ``system:node-proxier`` gives
it what a service proxy needs (Services, EndpointSlices, Nodes: read; Events: write)."""


def proxy_client_certificate(pki: Mapping[str, KeyPair], public_key: PublicKey) -> x509.Certificate:
    """kube-proxy's client certificate: CN system:kube-proxy, no group."""
    return _issue(pki["ca"], public_key, PROXY_USER, [])


def kubelet_serving_certificate(
    pki: Mapping[str, KeyPair],
    node_id: str,
    addresses: Iterable[IPAddress],
    public_key: PublicKey,
) -> x509.Certificate:
    """The kubelet's serving certificate of ``node_id``: its ID and ``addresses``, which
    the apiserver dials for logs and exec."""
    return _issue(
        pki["ca"],
        public_key,
        node_user(node_id),
        [NODES_GROUP],
        names=((node_id,), _unique(addresses)),
    )


def admin_certificate(
    pki: Mapping[str, KeyPair], identity: str, public_key: PublicKey, lifetime: datetime.timedelta
) -> x509.Certificate:
    """A cluster-admin client certificate for the user ``identity`` (O system:masters),
    valid for ``lifetime``: Kubernetes cannot revoke it, so it is kept short."""
    now = datetime.datetime.now(datetime.UTC)
    return _issue(pki["ca"], public_key, identity, [ADMIN_GROUP], not_after=now + lifetime)


def _unique(addresses: Iterable[IPAddress]) -> list[IPAddress]:
    return list(dict.fromkeys(addresses))


# -- etcd ---------------------------------------------------------------------------


async def load_or_create_pki(etcd: EtcdClient) -> dict[str, KeyPair]:
    """The PKI in etcd; made and stored first if there is none.

    Creation is one transaction that writes every entry only if none exists
    (create_revision == 0 for each), so two controllers racing make one PKI: the loser's
    transaction fails and it reads the winner's.

    :raises KubernetesPKIError: if etcd holds some entries but not all, or a corrupt one.
    :raises EtcdRequestError: if etcd does not answer (a restart retries).
    """
    # Here, not at the top: the apiserver's plans import this module for its key pairs, on
    # nodes that never talk to etcd, whose client the controlplane package loads with these.
    from roleserve_controlplane import compare_create_revision, put_operation

    stored = await _read(etcd)
    if stored is not None:
        return stored
    pki = generate_pki()
    keys = {name: PKI_PREFIX + name for name in STORED_NAMES}
    result = await etcd.transaction(
        [compare_create_revision(key, "=", 0) for key in keys.values()],
        [put_operation(keys[name], pair.to_json()) for name, pair in pki.items()],
    )
    if result.succeeded:
        return pki
    raced = await _read(etcd)
    if raced is None:  # deleted again between the transaction and the read
        raise KubernetesPKIError(f"the Kubernetes PKI under {PKI_PREFIX} vanished as it was made")
    return raced


async def _read(etcd: EtcdClient) -> dict[str, KeyPair] | None:
    """Every stored entry, or None if there is none."""
    found, _ = await etcd.get_prefix(PKI_PREFIX)
    if not found:
        return None
    entries = {kv.key.decode(): kv.value for kv in found}
    missing = [name for name in STORED_NAMES if PKI_PREFIX + name not in entries]
    if missing:
        raise KubernetesPKIError(
            f"the Kubernetes PKI in etcd lacks {', '.join(PKI_PREFIX + n for n in missing)}; "
            + _REMAKE
        )
    return {
        name: KeyPair.from_json(entries[PKI_PREFIX + name], PKI_PREFIX + name)
        for name in STORED_NAMES
    }


async def controller_pki(
    etcd: EtcdClient, node_id: str, addresses: Iterable[IPAddress]
) -> dict[str, KeyPair]:
    """Everything a controller's Kubernetes needs: the PKI from etcd (made if absent) and
    this controller's own ``apiserver`` serving certificate; every ``PKI_NAMES`` entry.

    :param etcd: a client of the cluster's etcd (``etcd_client`` makes one from the
        node's ``local_control_plane``).
    :param node_id: this controller's node ID, named in the apiserver's certificate.
    :param addresses: the addresses clients reach this controller at.
    """
    pki = await load_or_create_pki(etcd)
    pki["apiserver"] = apiserver_serving(pki, node_id, addresses)
    return {name: pki[name] for name in PKI_NAMES}


def etcd_client(control_plane: LocalControlPlane) -> EtcdClient:
    """A client of the local etcd member, for ``controller_pki`` (use it as ``async with``).

    How the Kubernetes controller reaches etcd: the controlplane worker publishes, with
    ``local_control_plane``, the member's client endpoint and the credentials it may act as
    a client with (the consensus CA's; etcd admits no other). The controller role requires
    ``consensus_member``, so a controller always has a local member.

    :raises ValueError: if no control plane runs here (``LocalControlPlane.NONE``).
    """
    endpoint, credentials = control_plane.etcd_endpoint, control_plane.etcd_credentials
    if endpoint is None or credentials is None:
        raise ValueError("no etcd member runs on this node (local_control_plane is NONE)")
    from roleserve_controlplane import EtcdClient  # here: see load_or_create_pki

    return EtcdClient([endpoint], credentials)
