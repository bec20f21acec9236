"""What ``cluster up`` shows of Kubernetes (``localcluster``, the plugin's ``roleserve.cluster``
extension): without the kube binaries, one line naming the command that builds them and no
column; with them, each node's K8S cell as a stand-in apiserver (HTTPS, the admin's client
certificate required, on a loopback address of the test's own at port 6443) reports it, and
the kubectl command under the table."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import ipaddress
import json
import random
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from roleserve_core import ClusterMember, ClusterView, RunnableSeen
from roleserve_kubernetes import localcluster
from roleserve_kubernetes.ctl import admin_kubeconfig
from roleserve_kubernetes.localcluster import (
    BUILD_HINT,
    EXTENSION,
    KUBECONFIG,
    KubernetesNotReadyError,
)
from roleserve_kubernetes.pki import KeyPair
from roleserve_kubernetes.plans import APISERVER_PORT
from roleserve_kubernetes.testing import throwaway_pki

pytestmark = pytest.mark.anyio

ALL = ("consensus_member", "kubernetes_controller", "kubernetes_worker")
WORKER = ("kubernetes_worker",)


def members(tmp_path: Path, address: str, config: str) -> tuple[ClusterMember, ...]:
    """n1 a controller and worker at ``address``; n2 and n3 workers (n3 never registers);
    every node with the roleserve.toml ``config``."""
    path = tmp_path / "roleserve.toml"
    path.write_text(config)
    return (
        ClusterMember(1, "node-1", address, path, ALL),
        ClusterMember(2, "node-2", "127.0.0.2", path, WORKER),
        ClusterMember(3, "node-3", "127.0.0.3", path, WORKER),
    )


def view(tmp_path: Path, nodes: tuple[ClusterMember, ...], said: list[str]) -> ClusterView:
    return ClusterView(tmp_path, tmp_path / "owner", nodes, said.append)


@pytest.fixture
def no_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A node config whose build directory is empty, and a PATH with no kube binary."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    return f'[plugins.kubernetes]\nkube_binaries_dir = "{tmp_path / "none"}"\n'


@pytest.fixture
def binaries(tmp_path: Path) -> str:
    """A node config whose build directory holds (fake) kube-apiserver and kubelet."""
    built = tmp_path / "bin"
    built.mkdir()
    for name in ("kube-apiserver", "kubelet"):
        (built / name).write_text("#!/bin/sh\n")
        (built / name).chmod(0o755)
    return f'[plugins.kubernetes]\nkube_binaries_dir = "{built}"\n'


def test_the_entry_point_names_the_extension() -> None:
    [entry] = importlib.metadata.entry_points(group="roleserve.cluster", name="kubernetes")
    assert entry.load() is EXTENSION


async def test_without_binaries_one_line_says_how_to_build_them_and_there_is_no_column(
    tmp_path: Path, no_binaries: str
) -> None:
    said: list[str] = []
    cluster = view(tmp_path, members(tmp_path, "127.0.0.1", no_binaries), said)
    await EXTENSION.settle(cluster)  # returns at once: nothing to wait for
    assert said == [BUILD_HINT]
    assert "`./dev kube-binaries` builds them (about 9 minutes" in BUILD_HINT
    assert await EXTENSION.cells(cluster) is None
    assert EXTENSION.hint(cluster) == BUILD_HINT
    assert not (tmp_path / KUBECONFIG).exists()


async def test_with_binaries_the_hint_is_the_kubectl_command(
    tmp_path: Path, binaries: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(localcluster, "kubectl", lambda: "/built/kubectl")
    cluster = view(tmp_path, members(tmp_path, "127.0.0.1", binaries), [])
    assert EXTENSION.hint(cluster) == (
        f"list Kubernetes' nodes with: /built/kubectl --kubeconfig {tmp_path / KUBECONFIG} "
        "get nodes"
    )


# -- against a stand-in apiserver ------------------------------------------------------


def node(name: str, ready: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


@asynccontextmanager
async def apiserver(
    tmp_path: Path, address: str, pki: dict[str, KeyPair], nodes: list[dict[str, Any]]
) -> AsyncIterator[list[bytes]]:
    """HTTPS on ``address``:6443 with ``pki``'s serving certificate: ``/readyz`` 200 to
    anyone, ``/api/v1/nodes`` the list of ``nodes`` to a client certificate of its CA;
    yields the request lines it answered."""
    requests: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readline()
        requests.append(request.strip())
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        path = request.split()[1]
        admitted = writer.get_extra_info("peercert") is not None
        status, body = b"200 OK", b"ok"
        if path == b"/api/v1/nodes":
            body = json.dumps({"items": nodes}).encode()
            if not admitted:  # as the real one: anonymous may ask /readyz, not this
                status, body = b"403 Forbidden", b"{}"
        writer.write(b"HTTP/1.0 %s\r\nContent-Length: %d\r\n\r\n" % (status, len(body)) + body)
        await writer.drain()
        writer.close()

    serving, ca = pki["apiserver"], pki["ca"]
    assert serving.certificate_pem is not None
    assert ca.certificate_pem is not None
    (tmp_path / "serving.pem").write_bytes(serving.certificate_pem + serving.key_pem)
    context = ssl.create_default_context(
        ssl.Purpose.CLIENT_AUTH, cadata=ca.certificate_pem.decode()
    )
    context.load_cert_chain(tmp_path / "serving.pem")
    context.verify_mode = ssl.CERT_OPTIONAL
    listener = await asyncio.start_server(answer, address, APISERVER_PORT, ssl=context)
    async with listener:
        yield requests


def kubeconfig_written_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, address: str, pki: dict[str, KeyPair]
) -> None:
    """The extension's kubeconfig step writes the test's kubeconfig for ``address`` at
    once, without asking any apiserver for its readiness."""

    async def written(_: Any, self_view: ClusterView, path: Path) -> str:
        write_kubeconfig(tmp_path, address, pki)
        return f"https://{address}:{APISERVER_PORT}"

    monkeypatch.setattr(localcluster.KubernetesExtension, "_write_kubeconfig", written)


def write_kubeconfig(tmp_path: Path, address: str, pki: dict[str, KeyPair]) -> None:
    ca, admin = pki["ca"], pki["admin"]
    assert ca.certificate_pem is not None
    assert admin.certificate_pem is not None
    config = admin_kubeconfig(
        f"https://{address}:{APISERVER_PORT}",
        ca.certificate_pem,
        admin.certificate_pem,
        admin.key_pem,
    )
    (tmp_path / KUBECONFIG).write_text(json.dumps(config))


@pytest.fixture
def address() -> str:
    return f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.{random.randint(1, 254)}"


async def test_each_nodes_cell_is_what_the_apiserver_reports(
    tmp_path: Path, binaries: str, address: str
) -> None:
    """n1: its Node Ready and its apiserver ready; n2: NotReady; n3: no Node registered."""
    pki = throwaway_pki([ipaddress.ip_address(address)])
    write_kubeconfig(tmp_path, address, pki)
    cluster = view(tmp_path, members(tmp_path, address, binaries), [])
    nodes = [node("node-1", "True"), node("node-2", "False")]
    async with apiserver(tmp_path, address, pki, nodes) as requests:
        cells = await EXTENSION.cells(cluster)
    assert cells == {"node-1": "Ready, api ready", "node-2": "NotReady", "node-3": "no Node"}
    assert b"GET /api/v1/nodes HTTP/1.0" in requests


async def test_without_an_apiserver_the_nodes_are_unknown(
    tmp_path: Path, binaries: str, address: str
) -> None:
    pki = throwaway_pki([ipaddress.ip_address(address)])
    write_kubeconfig(tmp_path, address, pki)
    cluster = view(tmp_path, members(tmp_path, address, binaries), [])
    cells = await EXTENSION.cells(cluster)
    assert cells == {"node-1": "?, api not ready", "node-2": "?", "node-3": "?"}


async def test_up_fails_with_one_line_when_a_node_is_never_ready(
    tmp_path: Path, binaries: str, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait for every Node Ready ends at its timeout with each waiting node's state."""
    monkeypatch.setattr(localcluster, "READY_TIMEOUT", 0.5)
    monkeypatch.setattr(localcluster, "POLL", 0.05)
    pki = throwaway_pki([ipaddress.ip_address(address)])

    async def tree(member: ClusterMember, dn: str) -> list[RunnableSeen]:
        return [RunnableSeen(dn, "NEW", "waiting for a kube-apiserver", "", final=False)]

    kubeconfig_written_at_once(monkeypatch, tmp_path, address, pki)
    said: list[str] = []
    cluster = ClusterView(
        tmp_path, tmp_path / "owner", members(tmp_path, address, binaries), said.append, tree
    )
    nodes = [node("node-1", "True"), node("node-2", "Unknown")]
    async with apiserver(tmp_path, address, pki, nodes):
        with anyio.fail_after(20), pytest.raises(KubernetesNotReadyError) as failed:
            await EXTENSION.settle(cluster)
    assert str(failed.value) == (
        "Kubernetes: not every Node was Ready after 0.5 s (n2: Unknown, n3: no Node); "
        "n2's kubelet (NEW: waiting for a kube-apiserver): `roleserve ctl tree n2` says more"
    )
    assert said == [
        "Kubernetes: waiting for a kube-apiserver to be ready",
        f"Kubernetes: https://{address}:{APISERVER_PORT} is ready; wrote an admin kubeconfig "
        f"to {tmp_path / KUBECONFIG}",
        "Kubernetes: waiting until every Node is Ready (3)",
    ]


async def test_up_fails_at_once_when_a_waiting_nodes_kubelet_failed_for_good(
    tmp_path: Path, binaries: str, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubelet DEAD of a final error (``ctl tree``'s) never makes its Node Ready: the
    wait ends at the first look, with the kubelet's own error, not at the timeout."""
    monkeypatch.setattr(localcluster, "POLL", 0.05)
    pki = throwaway_pki([ipaddress.ip_address(address)])

    async def tree(member: ClusterMember, dn: str) -> list[RunnableSeen]:
        if member.index != 2 or dn != "root.role.kubernetes_kubelet":
            return [RunnableSeen(dn, "HEALTHY", "", "", final=False)]
        return [RunnableSeen(dn, "DEAD", "", "SocketPathError: kubelet's socket is too long", True)]

    kubeconfig_written_at_once(monkeypatch, tmp_path, address, pki)
    cluster = ClusterView(
        tmp_path, tmp_path / "owner", members(tmp_path, address, binaries), print, tree
    )
    nodes = [node("node-1", "True"), node("node-3", "True")]
    async with apiserver(tmp_path, address, pki, nodes):
        with anyio.fail_after(20), pytest.raises(KubernetesNotReadyError) as failed:
            await EXTENSION.settle(cluster)
    assert str(failed.value) == (
        "Kubernetes: n2's Node will not be Ready: root.role.kubernetes_kubelet failed for "
        "good: SocketPathError: kubelet's socket is too long"
    )


def test_with_no_roles_known_the_binaries_are_looked_for_on_every_node(
    tmp_path: Path, binaries: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader that does not answer (stopping nodes, ``--detach`` interrupted) leaves the
    roles unknown: the hint is still the kubectl command, not "no kube binaries"."""
    monkeypatch.setattr(localcluster, "kubectl", lambda: "kubectl")
    unknown = tuple(
        dataclasses.replace(member, roles=()) for member in members(tmp_path, "127.0.0.1", binaries)
    )
    assert EXTENSION.hint(view(tmp_path, unknown, [])) != BUILD_HINT
