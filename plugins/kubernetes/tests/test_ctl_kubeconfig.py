"""``roleserve ctl kubeconfig``: a plugin's ``ctl`` sub-command, listed without loading the
plugin, and an admin kubeconfig from a real curator that kubectl accepts, naming an
apiserver (the stand-in, a real process) that serves; with none ready, a refusal."""

from __future__ import annotations

import argparse
import base64
import json
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

import anyio
import pytest

from roleserve_controlplane import EtcdBinary
from roleserve_controlplane.testing import (
    ETCD_SOURCES,
    CuratorCluster,
    CuratorNode,
    EtcdCluster,
    etcd_binary,
)
from roleserve_core import ClusterAccess, CtlError, open_ctl_session
from roleserve_core.identity import certificate_from_pem
from roleserve_core.testing import SupervisorRunner, random_loopback, require_real
from roleserve_kubernetes import kubebuild
from roleserve_kubernetes.ctl import _ready_servers, admin_kubeconfig, kubeconfig
from roleserve_kubernetes.pki import KeyPair, controller_pki, load_or_create_pki
from roleserve_kubernetes.service import APISERVER_PORT, curator_extension
from roleserve_kubernetes.testing import stand_in_apiserver

PROBE = """
import sys
from roleserve_core.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("loaded" if "roleserve_kubernetes" in sys.modules else "not loaded", file=sys.stderr)
"""


def _roleserve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=False
    )


def test_ctl_help_lists_kubeconfig_without_loading_the_plugin() -> None:
    done = _roleserve("ctl", "--help")
    assert "kubeconfig" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "not loaded"


def test_the_sub_commands_own_help_comes_from_the_plugin() -> None:
    done = _roleserve("ctl", "kubeconfig", "--help")
    assert "--out FILE" in done.stdout
    assert "--force" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "loaded"


def test_a_missing_out_is_a_usage_error_of_the_plugins_parser() -> None:
    done = _roleserve("ctl", "kubeconfig")
    assert "the following arguments are required: --out" in done.stderr


# -- against a curator --------------------------------------------------------------


@pytest.fixture(params=ETCD_SOURCES)
def binary(request: pytest.FixtureRequest) -> EtcdBinary:
    return etcd_binary(request.param)


@dataclass
class Cluster:
    """A bootstrapped cluster serving ``KubernetesCertificates``; its one node is a
    controller, with no kube-apiserver running unless a test starts the stand-in."""

    access: ClusterAccess
    """The owner's."""
    leader: CuratorNode


@pytest.fixture
async def cluster(
    binary: EtcdBinary, tmp_path: Path, supervisor_runner: SupervisorRunner
) -> AsyncIterator[Cluster]:
    etcd = EtcdCluster(binary, tmp_path / "etcd", supervisor_runner.start)
    async with CuratorCluster(etcd, extensions=[curator_extension()]) as curators:
        leader = await curators.bootstrap()
        assert curators.owner is not None
        yield Cluster(ClusterAccess.of(curators.owner, [leader.endpoint]), leader)


@pytest.fixture
def access(cluster: Cluster) -> ClusterAccess:
    return cluster.access


def _serving_files(directory: Path, pki: dict[str, KeyPair]) -> dict[str, Path]:
    """The stand-in's CA, certificate and key, written into ``directory``."""
    directory.mkdir()
    files: dict[str, Path] = {}
    for name, data in (
        ("ca", pki["ca"].certificate_pem),
        ("cert", pki["apiserver"].certificate_pem),
        ("key", pki["apiserver"].key_pem),
    ):
        assert data is not None
        files[name] = directory / f"{name}.pem"
        files[name].write_bytes(data)
        files[name].chmod(0o600)
    return files


@asynccontextmanager
async def serving_apiserver(cluster: Cluster, directory: Path) -> AsyncIterator[str]:
    """The stand-in kube-apiserver (a process) on the controller's address, port 6443,
    serving ``/readyz`` with this controller's certificate from the PKI in etcd; yields
    its URL once it serves."""
    host = cluster.leader.endpoint.rpartition(":")[0]
    assert cluster.leader.member is not None
    async with cluster.leader.member.client() as etcd:
        pki = await controller_pki(etcd, cluster.leader.node_id, [ip_address(host)])
    files = _serving_files(directory, pki)
    command = [
        str(stand_in_apiserver(directory / "kube-apiserver")),
        f"--bind-address={host}",
        f"--secure-port={APISERVER_PORT}",
        f"--tls-cert-file={files['cert']}",
        f"--tls-private-key-file={files['key']}",
        f"--client-ca-file={files['ca']}",
    ]
    async with await anyio.open_process(command, stderr=None) as process:
        assert process.stdout is not None
        with anyio.fail_after(30):
            assert (await process.stdout.receive()).startswith(b"serving")
        try:
            yield f"https://{host}:{APISERVER_PORT}"
        finally:
            process.terminate()


def built_kubectl() -> str:
    """The pinned build's kubectl (Debian's is 1.20)."""
    kubectl = kubebuild.pinned_bin_dir() / "kubectl"
    require_real("kubectl", kubectl.is_file(), f"no {kubectl}: ./dev kube-binaries")
    return str(kubectl)


async def _kubeconfig(access: ClusterAccess, out: Path, *, force: bool = False) -> None:
    args = argparse.Namespace(out=out, force=force, server=None)
    async with open_ctl_session(access, 10.0) as session:
        await kubeconfig(session, args)


@pytest.mark.anyio
async def test_without_a_ready_apiserver_nothing_is_written(
    access: ClusterAccess, tmp_path: Path
) -> None:
    """A controller node is UP whether or not its kube-apiserver runs (here none does):
    a kubeconfig naming it would only move the failure to kubectl."""
    out = tmp_path / "admin.kubeconfig"
    host = access.endpoints[0].rpartition(":")[0]
    with pytest.raises(CtlError) as refused:
        await _kubeconfig(access, out)
    assert refused.value.message == (
        f"no kube-apiserver is ready ({host}:6443: connection refused), so a kubeconfig "
        "would name none that serves; `roleserve ctl tree NODE` on a controller says why "
        "(e.g. kube-apiserver not found), or give --server URL"
    )
    assert refused.value.exit_code == 1
    assert not out.exists()
    # --server is the operator's choice (a load balancer, say): written unasked.
    args = argparse.Namespace(out=out, force=False, server="https://lb.example:6443")
    async with open_ctl_session(access, 10.0) as session:
        await kubeconfig(session, args)
    assert json.loads(out.read_text())["clusters"][0]["cluster"]["server"] == args.server


@pytest.mark.anyio
async def test_the_cli_refuses_in_one_line_without_a_ready_apiserver(
    access: ClusterAccess, tmp_path: Path
) -> None:
    credentials = tmp_path / "owner"
    access.save(credentials)
    out = tmp_path / "admin.kubeconfig"
    done = await anyio.run_process(
        [
            sys.executable,
            "-m",
            "roleserve_core",
            "ctl",
            "--credentials",
            str(credentials),
            "kubeconfig",
            "--out",
            str(out),
        ],
        check=False,
    )
    lines = done.stderr.decode().strip().splitlines()
    assert (done.returncode, len(lines)) == (1, 1), lines
    assert lines[0].startswith("roleserve ctl: error: no kube-apiserver is ready (")
    assert not out.exists()


@pytest.mark.anyio
async def test_the_admin_kubeconfig_is_accepted_by_kubectl(
    cluster: Cluster, tmp_path: Path
) -> None:
    out = tmp_path / "admin.kubeconfig"
    access = cluster.access
    async with serving_apiserver(cluster, tmp_path / "apiserver") as url:
        await _kubeconfig(access, out)
        kubectl = built_kubectl()
        # kubectl trusts the apiserver through the kubeconfig's CA, and gets /readyz.
        ready = await anyio.run_process(
            [kubectl, "--kubeconfig", str(out), "get", "--raw", "/readyz"]
        )
        assert ready.stdout == b"ok"
    assert json.loads(out.read_text())["clusters"][0]["cluster"]["server"] == url
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    config = json.loads(out.read_text())
    user = config["users"][0]["user"]
    certificate = certificate_from_pem(base64.b64decode(user["client-certificate-data"]))
    assert certificate.subject.rfc4514_string() == "CN=owner,O=system:masters"
    viewed = await anyio.run_process(
        [kubectl, "config", "view", "--kubeconfig", str(out), "--raw", "-o", "json"]
    )
    seen = json.loads(viewed.stdout)
    host = access.endpoints[0].rsplit(":", 1)[0]
    assert seen["current-context"] == f"roleserve-{host}"
    assert seen["clusters"][0]["cluster"]["server"] == f"https://{host}:6443"
    assert seen["users"][0]["user"]["client-key-data"] == user["client-key-data"]


@pytest.mark.anyio
async def test_an_existing_file_is_kept_unless_forced(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "config"
    out.write_text("other clusters' credentials\n")
    with pytest.raises(CtlError, match=f"{out} exists; pass --force to overwrite it"):
        await _kubeconfig(cluster.access, out)
    assert out.read_text() == "other clusters' credentials\n"
    async with serving_apiserver(cluster, tmp_path / "apiserver"):
        await _kubeconfig(cluster.access, out, force=True)
    assert json.loads(out.read_text())["kind"] == "Config"


@pytest.mark.anyio
async def test_every_ready_apiserver_gets_a_context_and_the_others_are_left_out(
    cluster: Cluster, tmp_path: Path
) -> None:
    """One cluster and context per ready apiserver, named after its host, the first one
    current; one that does not answer is left out with its reason."""
    gone = f"{random_loopback()}:6443"
    assert cluster.leader.member is not None
    async with cluster.leader.member.client() as etcd:
        ca_pem = (await load_or_create_pki(etcd))["ca"].certificate_pem
    assert ca_pem is not None
    async with serving_apiserver(cluster, tmp_path / "apiserver") as url:
        ready = url.removeprefix("https://")
        servers, left_out = await _ready_servers([gone, ready], ca_pem)
    assert (servers, left_out) == ([url], [f"{gone}: connection refused"])
    other = f"https://{random_loopback()}:6443"
    out = tmp_path / "config"
    config = admin_kubeconfig([url, other], ca_pem, b"certificate", b"key")
    out.write_text(json.dumps(config))
    host = ready.rpartition(":")[0]
    assert config["current-context"] == f"roleserve-{host}"
    contexts = await anyio.run_process(
        [built_kubectl(), "config", "get-contexts", "--kubeconfig", str(out), "-o", "name"]
    )
    names = [f"roleserve-{host}", f"roleserve-{other.removeprefix('https://')[:-5]}"]
    assert sorted(contexts.stdout.decode().split()) == sorted(names)  # kubectl sorts them
    assert [entry["cluster"]["server"] for entry in config["clusters"]] == [url, other]
