"""Launch plans: what each kube component is started with, as pure functions of inputs.

::

    ControllerInputs ──▶ apiserver_plan ─────────┐
                     ├─▶ controller_manager_plan ├─▶ LaunchPlan(name, arguments, files,
                     └─▶ scheduler_plan ─────────┘              env, binds, health)
    KubeletInputs ─────▶ kubelet_plan ───────────┘        │
                                                          ├─ write_plan: files, atomically
                                                          └─ program_spec: what the runner starts

A plan is data, so a test compares it whole (every flag, every file's content and mode)
without a kube binary, which cannot be installed here. The functions write nothing; the
runnable writes a plan's files (``write_plan``) just before it starts the program, each
atomically into the plugin's data directory, which is the node's own: two nodes on one
machine never share a file.

Fixed, as in Monogon: pods in ``10.192.0.0/11`` (the curator gives each node a prefix of
it), services in ``10.224.0.0/16`` (the apiserver's service IP is ``10.224.0.1``, cluster
DNS ``10.224.0.10``), domain ``cluster.local``. Node prefixes come from the curator, so the
controller-manager allocates none (``--allocate-node-cidrs=false``).

Where each component listens: the apiserver on the node's address, port 6443, for every
node of the cluster; the controller-manager (10257), the scheduler (10259) and the kubelet's
healthz (10248) on the node's local host (``local_exporter_host``: 127.0.0.1, or the node's
own loopback address when several nodes share a machine); the kubelet's API (10250) on the
node's address, for the apiserver.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from roleserve_core import Bind, ProgramSpec, endpoint, local_exporter_host, write_atomically
from roleserve_kubernetes.binaries import (
    APISERVER,
    CONTROLLER_MANAGER,
    KUBE_PROXY,
    KUBELET,
    SCHEDULER,
    Component,
)
from roleserve_kubernetes.cgroups import cgroup_root
from roleserve_kubernetes.cni import BRIDGE_PREFIX
from roleserve_kubernetes.klog import klog_parser
from roleserve_kubernetes.kubeconfig import KUBECONFIG_MODE, kubeconfig
from roleserve_kubernetes.pki import PKI_PREFIX, PROXY_USER, KeyPair
from roleserve_kubernetes.uts import with_hostname

__all__ = [
    "APISERVER_PORT",
    "CLUSTER_DNS",
    "CLUSTER_DOMAIN",
    "CONTROLLER_MANAGER_PORT",
    "KEY_MODE",
    "KUBELET_HEALTHZ_PORT",
    "KUBELET_PORT",
    "KUBE_PROXY_HEALTHZ_PORT",
    "KUBE_PROXY_METRICS_PORT",
    "LOOPBACK_NODE_IP",
    "POD_RANGE",
    "PUBLIC_MODE",
    "SCHEDULER_PORT",
    "SERVICE_RANGE",
    "ControllerInputs",
    "EtcdClientFiles",
    "Health",
    "KubeletInputs",
    "LaunchPlan",
    "NodeClientInputs",
    "PlannedFile",
    "ProxyInputs",
    "apiserver_health",
    "apiserver_plan",
    "apiserver_url",
    "controller_manager_plan",
    "kube_proxy_plan",
    "kubelet_plan",
    "kubelet_root",
    "program_spec",
    "scheduler_plan",
    "with_sbin",
    "write_plan",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

POD_RANGE = ipaddress.ip_network("10.192.0.0/11")
SERVICE_RANGE = ipaddress.ip_network("10.224.0.0/16")
CLUSTER_DNS = ipaddress.ip_address("10.224.0.10")
CLUSTER_DOMAIN = "cluster.local"
APISERVER_PORT = 6443
CONTROLLER_MANAGER_PORT = 10257
SCHEDULER_PORT = 10259
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_HEALTHZ_PORT = 10256
KUBE_PROXY_METRICS_PORT = 10249
SBIN = ("/usr/sbin", "/sbin")
"""Where Debian keeps ``nft``, which kube-proxy's nftables mode runs: on its PATH even
when the node's own PATH (a user's shell) lacks them."""
ETCD_PREFIX = "/kubernetes/registry"
"""Where the apiserver keeps its objects in etcd: next to the PKI (``/kubernetes/pki/``),
away from the curator's keys."""
KEY_MODE = 0o600
PUBLIC_MODE = 0o644
LOOPBACK_NODE_IP = "nodeIP can't be loopback address"
"""What the kubelet says at every status update of a node on a loopback address: it
refuses such a ``--node-ip``, so the Node has no InternalIP (the plugin README, "Loopback
clusters")."""


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """One file a component reads: written before it starts."""

    path: Path
    content: bytes
    mode: int


@dataclass(frozen=True, slots=True)
class Health:
    """Where a component says it is ready: ``GET <scheme>://<host>:<port><path>`` → 200."""

    host: str
    port: int
    path: str
    tls: bool = True
    """HTTPS; False: plain HTTP (the kubelet's healthz)."""
    ca_pem: bytes | None = None
    """Verify the server's certificate against this CA and the host as its IP address;
    None: accept any certificate (a controller's self-signed serving certificate). The
    probe also checks that the program started holds the address, so a stranger answering
    there never counts."""

    @property
    def bind(self) -> Bind:
        """The address the component listens on for this check."""
        return Bind(self.host, self.port)


@dataclass(frozen=True)
class LaunchPlan:
    """How to start one component: its arguments, the files it reads, where it is ready."""

    name: str
    """The program's name for the runner (``ProgramSpec.name``)."""
    component: Component
    arguments: tuple[str, ...]
    files: tuple[PlannedFile, ...]
    health: Health
    binds: tuple[Bind, ...] = ()
    """Every address it listens on (checked free before it starts)."""
    env: Mapping[str, str] = field(default_factory=dict)
    quiet: tuple[str, ...] = ()
    """Messages the program is known to repeat harmlessly here: logged once at WARNING,
    then at DEBUG (``klog.klog_parser``)."""
    hostname: str | None = None
    """The program's own host name, in a UTS namespace of its own (``uts``); None: the
    machine's."""


@dataclass(frozen=True, slots=True)
class EtcdClientFiles:
    """The local etcd member's TLS files, which the apiserver uses as an etcd client: the
    consensus CA and the member's certificate (ServerAuth and ClientAuth) with its key."""

    ca: Path
    certificate: Path
    key: Path


@dataclass(frozen=True)
class ControllerInputs:
    """Everything the three controller components' plans depend on."""

    directory: Path
    """The controller's directory in the plugin's data directory (one per node)."""
    address: IPAddress
    """The node's address: the apiserver listens and advertises here."""
    pki: Mapping[str, KeyPair]
    """Every entry of ``pki.PKI_NAMES``; ``apiserver`` is this controller's serving pair."""
    etcd_endpoint: str
    """``host:port`` of the local etcd member (``LocalControlPlane.etcd_endpoint``)."""
    etcd: EtcdClientFiles
    hostname: str | None = None
    """The apiserver's own host name, which names its identity Lease (``uts``): the
    node's ID where the node may give it one; None: the machine's."""


@dataclass(frozen=True)
class NodeClientInputs:
    """What a worker's component that calls the apiserver with a certificate of its own
    (the kubelet, kube-proxy) starts from: the fields ``KubeletInputs`` and
    ``ProxyInputs`` begin with, in this order."""

    directory: Path
    """The component's directory in the plugin's data directory (one per node)."""
    node_id: str
    address: IPAddress
    apiserver: str
    """The apiserver's URL, ``https://host:6443``."""
    ca_pem: bytes
    """The cluster's Kubernetes CA: it signed the apiserver and every client it admits."""
    client: KeyPair
    """The component's client certificate, from the curator: the kubelet's
    ``system:node:<node id>``, kube-proxy's ``system:kube-proxy``."""


@dataclass(frozen=True)
class KubeletInputs(NodeClientInputs):
    """Everything the kubelet's plan depends on."""

    serving: KeyPair
    """The kubelet's serving certificate, from the curator."""
    containerd_socket: Path
    pod_prefix: IPNetwork
    """The node's pod prefix, inside ``POD_RANGE``."""
    root_dir: Path | None = None
    """The kubelet's ``--root-dir``: the short name (``kubeletroot.root_mount_point``) of
    its root directory on disk (``kubelet_root(directory)``), which the worker mounts
    there; None: the directory on disk itself, as before 0.6 (its sockets then need a
    data directory of ~48 characters or fewer)."""


def apiserver_url(address: IPAddress | str) -> str:
    """``https://<address>:6443``."""
    return f"https://{endpoint(address, APISERVER_PORT)}"


def apiserver_plan(inputs: ControllerInputs) -> LaunchPlan:
    """kube-apiserver against the local etcd, serving on the node's address."""
    directory = inputs.directory / "apiserver"
    pki = inputs.pki
    ca = _public(directory / "ca.pem", _certificate(pki, "ca"))
    serving, serving_key = _pair(directory, "apiserver", pki["apiserver"])
    kubelet, kubelet_key = _pair(directory, "kubelet-client", pki["apiserver-kubelet-client"])
    proxy_ca = _public(directory / "front-proxy-ca.pem", _certificate(pki, "front-proxy-ca"))
    proxy, proxy_key = _pair(directory, "front-proxy-client", pki["front-proxy-client"])
    account = pki["service-account"]
    account_public = _public(directory / "service-account.pub", _public_key(account.key_pem))
    account_key = _secret(directory / "service-account-key.pem", account.key_pem)
    address, etcd = str(inputs.address), inputs.etcd
    flags = {
        "advertise-address": address,
        "bind-address": address,
        "secure-port": APISERVER_PORT,
        "etcd-servers": f"https://{inputs.etcd_endpoint}",
        "etcd-cafile": etcd.ca,
        "etcd-certfile": etcd.certificate,
        "etcd-keyfile": etcd.key,
        "etcd-prefix": ETCD_PREFIX,
        "service-cluster-ip-range": SERVICE_RANGE,
        "service-account-issuer": f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
        "service-account-key-file": account_public.path,
        "service-account-signing-key-file": account_key.path,
        "client-ca-file": ca.path,
        "tls-cert-file": serving.path,
        "tls-private-key-file": serving_key.path,
        "kubelet-certificate-authority": ca.path,
        "kubelet-client-certificate": kubelet.path,
        "kubelet-client-key": kubelet_key.path,
        "kubelet-preferred-address-types": "InternalIP,Hostname",
        "requestheader-client-ca-file": proxy_ca.path,
        "requestheader-allowed-names": _common_name(pki["front-proxy-client"]),
        "requestheader-username-headers": "X-Remote-User",
        "requestheader-group-headers": "X-Remote-Group",
        "requestheader-extra-headers-prefix": "X-Remote-Extra-",
        "proxy-client-cert-file": proxy.path,
        "proxy-client-key-file": proxy_key.path,
        "authorization-mode": "Node,RBAC",
        "enable-admission-plugins": "NodeRestriction",
        "allow-privileged": "true",
        "profiling": "false",
    }
    if inputs.address.is_loopback:
        flags["endpoint-reconciler-type"] = "none"
    health = apiserver_health(inputs)
    files = (ca, serving, serving_key, kubelet, kubelet_key, proxy_ca, proxy, proxy_key)
    return LaunchPlan(
        name="kube-apiserver",
        component=APISERVER,
        arguments=_arguments(flags),
        files=(*files, account_public, account_key),
        health=health,
        binds=(health.bind,),
        hostname=inputs.hostname,
    )


def apiserver_health(inputs: ControllerInputs) -> Health:
    """Where the controller's kube-apiserver says it is ready: ``/readyz`` on the node's
    address, TLS verified against the Kubernetes CA. 200 only once it reaches etcd and has
    run its post-start hooks (RBAC's bootstrap roles among them), so its clients (the
    controller-manager, the scheduler) wait for it before they start."""
    ca_pem = _certificate(inputs.pki, "ca")
    return Health(str(inputs.address), APISERVER_PORT, "/readyz", ca_pem=ca_pem)


def controller_manager_plan(inputs: ControllerInputs) -> LaunchPlan:
    """kube-controller-manager through the local apiserver; it signs CSRs with the CA and
    service-account tokens with the service-account key, and allocates no node prefixes."""
    directory = inputs.directory / "controller-manager"
    pki = inputs.pki
    config = _client_config(
        inputs, directory, "controller-manager", "system:kube-controller-manager"
    )
    ca, ca_key = _pair(directory, "ca", pki["ca"])
    account_key = _secret(directory / "service-account-key.pem", pki["service-account"].key_pem)
    host = local_exporter_host(inputs.address)
    flags = {
        **_controller_flags(config.path, host, CONTROLLER_MANAGER_PORT, directory),
        "cluster-cidr": POD_RANGE,
        "allocate-node-cidrs": "false",
        "service-cluster-ip-range": SERVICE_RANGE,
        "cluster-signing-cert-file": ca.path,
        "cluster-signing-key-file": ca_key.path,
        "root-ca-file": ca.path,
        "service-account-private-key-file": account_key.path,
        "use-service-account-credentials": "true",
    }
    health = Health(host, CONTROLLER_MANAGER_PORT, "/healthz")
    return LaunchPlan(
        name="kube-controller-manager",
        component=CONTROLLER_MANAGER,
        arguments=_arguments(flags),
        files=(config, ca, ca_key, account_key),
        health=health,
        binds=(health.bind,),
    )


def scheduler_plan(inputs: ControllerInputs) -> LaunchPlan:
    """kube-scheduler through the local apiserver."""
    directory = inputs.directory / "scheduler"
    config = _client_config(inputs, directory, "scheduler", "system:kube-scheduler")
    host = local_exporter_host(inputs.address)
    health = Health(host, SCHEDULER_PORT, "/healthz")
    return LaunchPlan(
        name="kube-scheduler",
        component=SCHEDULER,
        arguments=_arguments(_controller_flags(config.path, host, SCHEDULER_PORT, directory)),
        files=(config,),
        health=health,
        binds=(health.bind,),
    )


def kubelet_plan(inputs: KubeletInputs) -> LaunchPlan:
    """The kubelet: a KubeletConfiguration (JSON, which the kubelet reads as YAML), a
    kubeconfig with the node's client certificate, its serving certificate, containerd's
    CRI socket, and the node's pod prefix.

    What is the node's own, so that several kubelets share a machine: its root directory
    and the pods' logs in ``directory``, its cgroup root (``cgroups.cgroup_root``, made
    before it starts), its API on the node's address and its healthz on the node's local
    host, containerd's socket of the node."""
    directory = inputs.directory
    ca = _public(directory / "ca.pem", inputs.ca_pem)
    serving, serving_key = _pair(directory, "kubelet", inputs.serving)
    user = f"system:node:{inputs.node_id}"
    credentials = _kubeconfig_file(directory, inputs.apiserver, inputs.ca_pem, inputs.client, user)
    address, host = str(inputs.address), local_exporter_host(inputs.address)
    settings = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": host,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca.path)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(serving.path),
        "tlsPrivateKeyFile": str(serving_key.path),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [str(CLUSTER_DNS)],
        "podCIDR": str(inputs.pod_prefix),
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root(inputs.node_id),
        "podLogsDir": str(directory / "pod-logs"),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }
    config = _public(directory / "config.json", json.dumps(settings, indent=2).encode() + b"\n")
    flags = {
        "config": config.path,
        "kubeconfig": credentials.path,
        "container-runtime-endpoint": f"unix://{inputs.containerd_socket}",
        "hostname-override": inputs.node_id,
        "node-ip": address,
        "root-dir": inputs.root_dir or kubelet_root(directory),
        "cert-dir": directory / "certificates",
    }
    health = Health(host, KUBELET_HEALTHZ_PORT, "/healthz", tls=False)
    return LaunchPlan(
        name="kubelet",
        component=KUBELET,
        arguments=_arguments(flags),
        files=(ca, serving, serving_key, credentials, config),
        health=health,
        binds=(health.bind, Bind(address, KUBELET_PORT)),
        quiet=(LOOPBACK_NODE_IP,) if inputs.address.is_loopback else (),
    )


@dataclass(frozen=True)
class ProxyInputs(NodeClientInputs):
    """Everything kube-proxy's plan depends on."""

    search_path: str
    """The node's PATH, to which kube-proxy's gets ``SBIN``."""


def kube_proxy_plan(inputs: ProxyInputs) -> LaunchPlan:
    """kube-proxy in nftables mode (the kernel has nf_tables built in, and Debian's ``nft``
    is installable; iptables' legacy tables are not what this kernel is built around).

    Pods' traffic is told from the rest by the interface it comes in on, a node's pod
    bridge (``cni.BRIDGE_PREFIX``), not by the cluster's network, which a node does not
    know (each local cluster on a machine has its own). Its Services' NodePorts answer on
    the node's address only (``nodePortAddresses``: a
    loopback cluster's nodes share the host's other addresses). It changes no sysctl of
    the machine's (``conntrack``: zeros leave each as it is; a loopback cluster's proxy
    runs in the host's own network namespace). Ready when ``/healthz`` answers 200: its
    rules were synced recently."""
    directory = inputs.directory
    credentials = _kubeconfig_file(
        directory, inputs.apiserver, inputs.ca_pem, inputs.client, PROXY_USER
    )
    address, host = str(inputs.address), local_exporter_host(inputs.address)
    prefix_length = 32 if inputs.address.version == 4 else 128
    settings = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(credentials.path)},
        "mode": "nftables",
        "detectLocalMode": "InterfaceNamePrefix",
        "detectLocal": {"interfaceNamePrefix": BRIDGE_PREFIX},
        "hostnameOverride": inputs.node_id,
        "healthzBindAddress": endpoint(host, KUBE_PROXY_HEALTHZ_PORT),
        "metricsBindAddress": endpoint(host, KUBE_PROXY_METRICS_PORT),
        "nodePortAddresses": [f"{address}/{prefix_length}"],
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    config = _public(directory / "config.json", json.dumps(settings, indent=2).encode() + b"\n")
    health = Health(host, KUBE_PROXY_HEALTHZ_PORT, "/healthz", tls=False)
    return LaunchPlan(
        name="kube-proxy",
        component=KUBE_PROXY,
        arguments=_arguments({"config": config.path}),
        files=(credentials, config),
        health=health,
        binds=(health.bind, Bind(host, KUBE_PROXY_METRICS_PORT)),
        env={"PATH": with_sbin(inputs.search_path)},
    )


def with_sbin(search_path: str) -> str:
    """``search_path`` (a PATH) with ``SBIN`` after it, each directory once."""
    path = [part for part in search_path.split(":") if part]
    return ":".join([*path, *(d for d in SBIN if d not in path)])


def kubelet_root(directory: Path) -> Path:
    """The kubelet's root directory on disk (its pods' volumes, its checkpoints) in
    ``directory``, the kubelet's own; the kubelet names it by a short path mounted onto it
    (``KubeletInputs.root_dir``), for its sockets there."""
    return directory / "root"


def write_plan(plan: LaunchPlan) -> None:
    """Write every file of ``plan`` atomically, in directories only the node may read.

    :raises OSError: naming the file that could not be written.
    """
    for planned in plan.files:
        planned.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(planned.path, planned.content, planned.mode)


def program_spec(plan: LaunchPlan, binary: Path, state_dir: Path) -> ProgramSpec:
    """What the runner starts for ``plan``: ``binary`` (found before), its arguments, its
    addresses; its record in ``state_dir`` (the plugin's data directory); its output, klog's
    lines, parsed into levels (``klog``); in a UTS namespace of its own if the plan names a
    host name (``uts``)."""
    spec = ProgramSpec(
        name=plan.name,
        executable=str(binary),
        setting=plan.component.install_hint,
        arguments=plan.arguments,
        state_dir=state_dir,
        binds=plan.binds,
        env=plan.env,
        parser=klog_parser(quiet=plan.quiet),
    )
    return spec if plan.hostname is None else with_hostname(spec, plan.hostname)


def _controller_flags(config: Path, host: str, port: int, directory: Path) -> dict[str, object]:
    """What the controller-manager and the scheduler share: their kubeconfig for the API,
    for delegated authentication and authorization, and their secure port (serving a
    certificate of their own making in ``serving/``)."""
    return {
        "kubeconfig": config,
        "authentication-kubeconfig": config,
        "authorization-kubeconfig": config,
        "bind-address": host,
        "secure-port": port,
        "cert-dir": directory / "serving",
        "leader-elect": "true",
        "profiling": "false",
    }


def _client_config(inputs: ControllerInputs, directory: Path, name: str, user: str) -> PlannedFile:
    """The kubeconfig of a controller component, with its client certificate ``name``."""
    return _kubeconfig_file(
        directory,
        apiserver_url(inputs.address),
        _certificate(inputs.pki, "ca"),
        inputs.pki[name],
        user,
    )


def _kubeconfig_file(
    directory: Path, server: str, ca_pem: bytes, pair: KeyPair, user: str
) -> PlannedFile:
    content = kubeconfig(server, ca_pem, _certificate_of(pair, user), pair.key_pem, user)
    return PlannedFile(directory / "kubeconfig", content, KUBECONFIG_MODE)


def _arguments(flags: Mapping[str, object]) -> tuple[str, ...]:
    """``--name=value`` for each flag, in the order given."""
    return tuple(f"--{name}={value}" for name, value in flags.items())


def _pair(directory: Path, name: str, pair: KeyPair) -> tuple[PlannedFile, PlannedFile]:
    """``<name>.pem`` (0644) and ``<name>-key.pem`` (0600)."""
    return (
        _public(directory / f"{name}.pem", _certificate_of(pair, name)),
        _secret(directory / f"{name}-key.pem", pair.key_pem),
    )


def _public(path: Path, content: bytes) -> PlannedFile:
    return PlannedFile(path, content, PUBLIC_MODE)


def _secret(path: Path, content: bytes) -> PlannedFile:
    return PlannedFile(path, content, KEY_MODE)


def _certificate(pki: Mapping[str, KeyPair], name: str) -> bytes:
    return _certificate_of(pki[name], name)


def _certificate_of(pair: KeyPair, name: str) -> bytes:
    """The certificate of ``pair``; a pair without one cannot serve or authenticate.

    :raises ValueError: naming the entry, for a PKI entry stored without its certificate.
    """
    if pair.certificate_pem is None:
        raise ValueError(
            f"the Kubernetes key pair {name!r} has no certificate; its entry under "
            f"{PKI_PREFIX} in etcd is damaged: restore it from a backup of etcd"
        )
    return pair.certificate_pem


def _common_name(pair: KeyPair) -> str:
    """The CN of ``pair``'s certificate: the front proxy's name the apiserver admits."""
    certificate = x509.load_pem_x509_certificate(_certificate_of(pair, "front-proxy-client"))
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _public_key(key_pem: bytes) -> bytes:
    """The public half of a PEM private key, as PEM (the apiserver verifies tokens with it)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
