"""The launch plans, compared whole: every flag, every file with its content and mode.

The kube binaries cannot be installed here, so a plan is checked as data; that its flags
and files fit together is shown by the stand-in apiserver of ``test_runnables``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ipaddress
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from roleserve_core import Bind
from roleserve_kubernetes.binaries import APISERVER, CONTROLLER_MANAGER, KUBELET, SCHEDULER
from roleserve_kubernetes.kubeconfig import kubeconfig
from roleserve_kubernetes.pki import PKI_NAMES, KeyPair
from roleserve_kubernetes.plans import (
    ControllerInputs,
    EtcdClientFiles,
    Health,
    KubeletInputs,
    LaunchPlan,
    PlannedFile,
    apiserver_plan,
    controller_manager_plan,
    kubelet_plan,
    program_spec,
    scheduler_plan,
    write_plan,
)
from roleserve_kubernetes.testing import throwaway_pki
from roleserve_kubernetes.uts import SET_HOSTNAME

ADDRESS = ipaddress.ip_address("10.0.0.7")
LOOPBACK = ipaddress.ip_address("127.0.0.12")


@pytest.fixture(scope="module")
def pki() -> dict[str, KeyPair]:
    return throwaway_pki([ADDRESS])


def controller(pki: dict[str, KeyPair], address: Any = ADDRESS) -> ControllerInputs:
    return ControllerInputs(
        directory=Path("/data/plugins/kubernetes/controller"),
        address=address,
        pki=pki,
        etcd_endpoint=f"{address}:7836",
        etcd=EtcdClientFiles(Path("/etcd/ca.pem"), Path("/etcd/m.pem"), Path("/etcd/m-key.pem")),
    )


def cert(pki: dict[str, KeyPair], name: str) -> bytes:
    certificate = pki[name].certificate_pem
    assert certificate is not None
    return certificate


def public_key(key_pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_apiserver_plan(pki: dict[str, KeyPair]) -> None:
    d = Path("/data/plugins/kubernetes/controller/apiserver")
    assert pki.keys() == set(PKI_NAMES)
    assert apiserver_plan(controller(pki)) == LaunchPlan(
        name="kube-apiserver",
        component=APISERVER,
        arguments=(
            "--advertise-address=10.0.0.7",
            "--bind-address=10.0.0.7",
            "--secure-port=6443",
            "--etcd-servers=https://10.0.0.7:7836",
            "--etcd-cafile=/etcd/ca.pem",
            "--etcd-certfile=/etcd/m.pem",
            "--etcd-keyfile=/etcd/m-key.pem",
            "--etcd-prefix=/kubernetes/registry",
            "--service-cluster-ip-range=10.224.0.0/16",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d}/service-account.pub",
            f"--service-account-signing-key-file={d}/service-account-key.pem",
            f"--client-ca-file={d}/ca.pem",
            f"--tls-cert-file={d}/apiserver.pem",
            f"--tls-private-key-file={d}/apiserver-key.pem",
            f"--kubelet-certificate-authority={d}/ca.pem",
            f"--kubelet-client-certificate={d}/kubelet-client.pem",
            f"--kubelet-client-key={d}/kubelet-client-key.pem",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--requestheader-client-ca-file={d}/front-proxy-ca.pem",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={d}/front-proxy-client.pem",
            f"--proxy-client-key-file={d}/front-proxy-client-key.pem",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--profiling=false",
        ),
        files=(
            PlannedFile(d / "ca.pem", cert(pki, "ca"), 0o644),
            PlannedFile(d / "apiserver.pem", cert(pki, "apiserver"), 0o644),
            PlannedFile(d / "apiserver-key.pem", pki["apiserver"].key_pem, 0o600),
            PlannedFile(d / "kubelet-client.pem", cert(pki, "apiserver-kubelet-client"), 0o644),
            PlannedFile(
                d / "kubelet-client-key.pem", pki["apiserver-kubelet-client"].key_pem, 0o600
            ),
            PlannedFile(d / "front-proxy-ca.pem", cert(pki, "front-proxy-ca"), 0o644),
            PlannedFile(d / "front-proxy-client.pem", cert(pki, "front-proxy-client"), 0o644),
            PlannedFile(d / "front-proxy-client-key.pem", pki["front-proxy-client"].key_pem, 0o600),
            PlannedFile(
                d / "service-account.pub", public_key(pki["service-account"].key_pem), 0o644
            ),
            PlannedFile(d / "service-account-key.pem", pki["service-account"].key_pem, 0o600),
        ),
        health=Health("10.0.0.7", 6443, "/readyz", ca_pem=cert(pki, "ca")),
        binds=(Bind("10.0.0.7", 6443),),
    )


def test_controller_manager_plan(pki: dict[str, KeyPair]) -> None:
    d = Path("/data/plugins/kubernetes/controller/controller-manager")
    config = kubeconfig(
        "https://10.0.0.7:6443",
        cert(pki, "ca"),
        cert(pki, "controller-manager"),
        pki["controller-manager"].key_pem,
        "system:kube-controller-manager",
    )
    assert controller_manager_plan(controller(pki)) == LaunchPlan(
        name="kube-controller-manager",
        component=CONTROLLER_MANAGER,
        arguments=(
            f"--kubeconfig={d}/kubeconfig",
            f"--authentication-kubeconfig={d}/kubeconfig",
            f"--authorization-kubeconfig={d}/kubeconfig",
            "--bind-address=127.0.0.1",
            "--secure-port=10257",
            f"--cert-dir={d}/serving",
            "--leader-elect=true",
            "--profiling=false",
            "--cluster-cidr=10.192.0.0/11",
            "--allocate-node-cidrs=false",
            "--service-cluster-ip-range=10.224.0.0/16",
            f"--cluster-signing-cert-file={d}/ca.pem",
            f"--cluster-signing-key-file={d}/ca-key.pem",
            f"--root-ca-file={d}/ca.pem",
            f"--service-account-private-key-file={d}/service-account-key.pem",
            "--use-service-account-credentials=true",
        ),
        files=(
            PlannedFile(d / "kubeconfig", config, 0o600),
            PlannedFile(d / "ca.pem", cert(pki, "ca"), 0o644),
            PlannedFile(d / "ca-key.pem", pki["ca"].key_pem, 0o600),
            PlannedFile(d / "service-account-key.pem", pki["service-account"].key_pem, 0o600),
        ),
        health=Health("127.0.0.1", 10257, "/healthz"),
        binds=(Bind("127.0.0.1", 10257),),
    )


def test_scheduler_plan_on_a_loopback_node(pki: dict[str, KeyPair]) -> None:
    """A node on a loopback address (several on one machine) keeps its own local host."""
    d = Path("/data/plugins/kubernetes/controller/scheduler")
    config = kubeconfig(
        "https://127.0.0.12:6443",
        cert(pki, "ca"),
        cert(pki, "scheduler"),
        pki["scheduler"].key_pem,
        "system:kube-scheduler",
    )
    assert scheduler_plan(controller(pki, LOOPBACK)) == LaunchPlan(
        name="kube-scheduler",
        component=SCHEDULER,
        arguments=(
            f"--kubeconfig={d}/kubeconfig",
            f"--authentication-kubeconfig={d}/kubeconfig",
            f"--authorization-kubeconfig={d}/kubeconfig",
            "--bind-address=127.0.0.12",
            "--secure-port=10259",
            f"--cert-dir={d}/serving",
            "--leader-elect=true",
            "--profiling=false",
        ),
        files=(PlannedFile(d / "kubeconfig", config, 0o600),),
        health=Health("127.0.0.12", 10259, "/healthz"),
        binds=(Bind("127.0.0.12", 10259),),
    )


def test_kubelet_plan(pki: dict[str, KeyPair]) -> None:
    d = Path("/data/plugins/kubernetes/kubelet")
    client, serving = pki["admin"], pki["apiserver"]  # any pairs of the right kind
    inputs = KubeletInputs(
        directory=d,
        node_id="node-0123",
        address=ADDRESS,
        apiserver="https://10.0.0.1:6443",
        ca_pem=cert(pki, "ca"),
        client=client,
        serving=serving,
        containerd_socket=Path("/data/plugins/kubernetes/containerd/containerd.sock"),
        pod_prefix=ipaddress.ip_network("10.192.3.0/24"),
    )
    plan = kubelet_plan(inputs)
    configuration = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "10.0.0.7",
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": f"{d}/ca.pem"},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": f"{d}/kubelet.pem",
        "tlsPrivateKeyFile": f"{d}/kubelet-key.pem",
        "clusterDomain": "cluster.local",
        "clusterDNS": ["10.224.0.10"],
        "podCIDR": "10.192.3.0/24",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": "/roleserve-" + hashlib.sha256(b"node-0123").hexdigest()[:10],
        "podLogsDir": f"{d}/pod-logs",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }
    assert json.loads(plan.files[-1].content) == configuration
    config = kubeconfig(
        "https://10.0.0.1:6443",
        cert(pki, "ca"),
        cert(pki, "admin"),
        client.key_pem,
        "system:node:node-0123",
    )
    assert plan == LaunchPlan(
        name="kubelet",
        component=KUBELET,
        arguments=(
            f"--config={d}/config.json",
            f"--kubeconfig={d}/kubeconfig",
            "--container-runtime-endpoint=unix:///data/plugins/kubernetes/containerd/containerd.sock",
            "--hostname-override=node-0123",
            "--node-ip=10.0.0.7",
            f"--root-dir={d}/root",
            f"--cert-dir={d}/certificates",
        ),
        files=(
            PlannedFile(d / "ca.pem", cert(pki, "ca"), 0o644),
            PlannedFile(d / "kubelet.pem", cert(pki, "apiserver"), 0o644),
            PlannedFile(d / "kubelet-key.pem", serving.key_pem, 0o600),
            PlannedFile(d / "kubeconfig", config, 0o600),
            PlannedFile(d / "config.json", plan.files[-1].content, 0o644),
        ),
        health=Health("127.0.0.1", 10248, "/healthz", tls=False),
        binds=(Bind("127.0.0.1", 10248), Bind("10.0.0.7", 10250)),
    )


def test_two_kubelets_on_one_machine_share_no_cgroup_log_or_port(
    pki: dict[str, KeyPair],
) -> None:
    """Each node's kubelet has its own cgroup root, pod logs, root directory and ports;
    one on a loopback address says once that it cannot use it as its node IP."""

    def plan(node: str, address: str) -> LaunchPlan:
        inputs = KubeletInputs(
            directory=Path(f"/{node}/plugins/kubernetes/kubelet"),
            node_id=f"node-{node}",
            address=ipaddress.ip_address(address),
            apiserver="https://127.0.0.11:6443",
            ca_pem=cert(pki, "ca"),
            client=pki["admin"],
            serving=pki["apiserver"],
            containerd_socket=Path(f"/run/{node}/containerd.sock"),
            pod_prefix=ipaddress.ip_network("10.192.3.0/24"),
        )
        return kubelet_plan(inputs)

    first, second = plan("n1", "127.0.0.11"), plan("n2", "127.0.0.12")
    owned = []
    for each in (first, second):
        settings = json.loads(each.files[-1].content)
        root = [a for a in each.arguments if a.startswith("--root-dir=")]
        owned.append({settings["cgroupRoot"], settings["podLogsDir"], *root, *each.binds})
        assert each.quiet == ("nodeIP can't be loopback address",)
    assert not owned[0] & owned[1]


def test_kubeconfig_is_whole_and_embeds_the_credentials() -> None:
    config = json.loads(kubeconfig("https://[fd00::1]:6443", b"CA", b"CERT", b"KEY", "u"))
    assert config == {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kubernetes",
                "cluster": {
                    "server": "https://[fd00::1]:6443",
                    "certificate-authority-data": base64.b64encode(b"CA").decode(),
                },
            }
        ],
        "users": [
            {
                "name": "u",
                "user": {
                    "client-certificate-data": base64.b64encode(b"CERT").decode(),
                    "client-key-data": base64.b64encode(b"KEY").decode(),
                },
            }
        ],
        "contexts": [{"name": "u", "context": {"cluster": "kubernetes", "user": "u"}}],
        "current-context": "u",
        "preferences": {},
    }


def test_write_plan_writes_every_file_with_its_mode(
    pki: dict[str, KeyPair], tmp_path: Path
) -> None:
    inputs = controller(pki)
    plan = apiserver_plan(
        ControllerInputs(tmp_path / "a" / "controller", ADDRESS, pki, "x:1", inputs.etcd)
    )
    key = plan.files[2].path  # a key file left 0644 by someone becomes 0600
    key.parent.mkdir(parents=True)
    key.write_bytes(b"stale")
    key.chmod(0o644)
    write_plan(plan)
    for planned in plan.files:
        assert planned.path.read_bytes() == planned.content
        assert stat.S_IMODE(planned.path.stat().st_mode) == planned.mode
    spec = program_spec(plan, Path("/usr/bin/kube-apiserver"), tmp_path)
    assert (spec.name, spec.executable, tuple(spec.arguments), tuple(spec.binds)) == (
        "kube-apiserver",
        "/usr/bin/kube-apiserver",
        plan.arguments,
        plan.binds,
    )
    assert "kube_apiserver" in spec.setting


def test_an_apiserver_with_a_host_name_starts_in_a_uts_namespace_of_its_own(
    pki: dict[str, KeyPair], tmp_path: Path
) -> None:
    """Two controllers on one machine: each apiserver under its node's host name, so each
    has its own identity Lease; without a host name, the binary itself."""
    binary = Path("/usr/bin/kube-apiserver")
    specs = []
    for node_id in ("node-" + "aa" * 16, "node-" + "bb" * 16):
        plan = apiserver_plan(dataclasses.replace(controller(pki), hostname=node_id))
        assert plan.hostname == node_id
        spec = program_spec(plan, binary, tmp_path)
        assert (spec.executable, tuple(spec.arguments)) == (
            "unshare",
            ("--uts", "--", "/bin/sh", "-c", SET_HOSTNAME, node_id, str(binary), *plan.arguments),
        )
        specs.append(spec)
    assert specs[0].arguments != specs[1].arguments
    plain = apiserver_plan(controller(pki))
    assert plain.hostname is None
    spec = program_spec(plain, binary, tmp_path)
    assert (spec.executable, tuple(spec.arguments)) == (str(binary), plain.arguments)
    others = (controller_manager_plan(controller(pki)), scheduler_plan(controller(pki)))
    assert [plan.hostname for plan in others] == [None, None]  # no identity of their own


def test_two_nodes_on_one_machine_plan_no_common_file(pki: dict[str, KeyPair]) -> None:
    def paths(directory: Path, address: Any) -> set[Path]:
        inputs = ControllerInputs(directory, address, pki, "x:1", controller(pki).etcd)
        plans = (apiserver_plan(inputs), controller_manager_plan(inputs), scheduler_plan(inputs))
        return {planned.path for plan in plans for planned in plan.files}

    first = paths(Path("/n1/plugins/kubernetes/controller"), ipaddress.ip_address("127.0.0.11"))
    second = paths(Path("/n2/plugins/kubernetes/controller"), ipaddress.ip_address("127.0.0.12"))
    assert len(first) == 15
    assert not first & second
