"""What ``roleserve cluster up`` shows of Kubernetes: the core's ``roleserve.cluster`` extension.

::

    cluster up ── every node UP and HEALTHY ──▶ settle(view)
        no controller finds kube-apiserver (its settings, as the node looks: binaries.py)
            └─▶ one line: containerd only; `./dev kube-binaries` builds them (~9 min cold)
        present
            ├─ wait until a controller's kube-apiserver answers /readyz
            ├─ <dir>/kubeconfig: an admin kubeconfig, written as `ctl kubeconfig` writes one
        ├─ this user's inotify instances nearly all in use: one line naming the sysctl
           (inotify.py: each kubelet needs about six)
            └─ wait until the Node of every kubernetes_worker that finds the kubelet is
               Ready (the apiserver's word); at once, fail if its kubelet or container
               runtime failed for good (ctl tree's DEAD, final)
        ──▶ "the cluster is up" ──▶ under the table: kubectl --kubeconfig <dir>/kubeconfig get nodes

    the status table's K8S column, per node, as the apiserver reports it:
        Ready | NotReady | Unknown     the Node's Ready condition (kubernetes_worker nodes)
        no Node                        no Node object of that name (yet)
        + api ready | api not ready    its kube-apiserver's /readyz (kubernetes_controller)
        ?                              the Nodes could not be read (no ready apiserver)

Why the apiserver and not the node's own word: a kubelet that runs is not a Node that is
Ready (it may not have registered, or its runtime may not be ready), and what kubectl will
show is what the apiserver says. Loaded by the core's ``cluster`` command only, through
the entry point: the core never imports this plugin.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import tempfile
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from roleserve_kubernetes.binaries import APISERVER, KUBELET, KubeBinaries
from roleserve_kubernetes.errors import KubernetesError
from roleserve_kubernetes.inotify import inotify_shortage
from roleserve_kubernetes.kubebuild import pinned_bin_dir
from roleserve_kubernetes.plans import APISERVER_PORT, Health
from roleserve_kubernetes.probe import PROBE_TIMEOUT, probe

if TYPE_CHECKING:
    from roleserve_core import ClusterMember, ClusterView

__all__ = [
    "BUILD_HINT",
    "EXTENSION",
    "KUBECONFIG",
    "READY_TIMEOUT",
    "KubernetesExtension",
    "KubernetesNotReadyError",
    "kubectl",
]

KUBECONFIG = "kubeconfig"
"""The admin kubeconfig ``up`` writes, in the cluster's directory."""
READY_TIMEOUT = 300.0
"""Seconds ``up`` waits for a ready apiserver, then as long again for every Node Ready."""
POLL = 1.0
CELL_PATIENCE = 3.0
"""Seconds the table waits for the Nodes and for each apiserver's /readyz (all at once)."""
LOOK_EVERY = 5.0
"""Seconds between two looks at a waiting node's kubelet and runtime (``ctl tree``'s)."""
KUBELET_DN = "root.role.kubernetes_kubelet"
WORKER_DNS = ("root.role.kubernetes_worker", KUBELET_DN)
"""The subtrees of a worker's container runtime and kubelet."""
BUILD_HINT = (
    "Kubernetes: no kube binaries found (no controller has kube-apiserver), so the nodes "
    "run containerd only; `./dev kube-binaries` builds them (about 9 minutes the first time)"
)
"""The one line of a cluster without the binaries (the figure: the plugin README's)."""
CONTROLLER, WORKER = "kubernetes_controller", "kubernetes_worker"


class KubernetesNotReadyError(KubernetesError):
    """``cluster up`` waited in vain for an apiserver, or for every Node to be Ready."""


def kubectl() -> str:
    """The kubectl to name: the pinned build's (``./dev kube-binaries`` builds one of the
    same version; Debian's is far older), else the one on PATH."""
    built = pinned_bin_dir() / "kubectl"
    if os.access(built, os.X_OK):
        return str(built)
    return shutil.which("kubectl") or "kubectl"


def _binaries(member: ClusterMember) -> KubeBinaries:
    """The binaries settings of ``member``'s ``roleserve.toml`` (unreadable: defaults; the
    node says why it cannot start)."""
    try:
        data = tomllib.loads(member.config.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        data = {}
    plugins = data.get("plugins")
    section = plugins.get("kubernetes") if isinstance(plugins, dict) else None
    return KubeBinaries.of(section if isinstance(section, dict) else {})


def binaries_present(view: ClusterView) -> bool:
    """Whether some controller finds kube-apiserver, as it would: without one, no kubelet
    has an apiserver to register with."""
    return bool(_apiservers(view))


def _apiservers(view: ClusterView) -> list[ClusterMember]:
    """The controllers that find kube-apiserver."""
    return [member for member in _controllers(view) if _binaries(member).find(APISERVER)]


def _kubelets(view: ClusterView) -> list[ClusterMember]:
    """The workers that find the kubelet: those whose Node ``up`` waits for."""
    return [member for member in _workers(view) if _binaries(member).find(KUBELET)]


@dataclass(frozen=True, slots=True)
class _Admin:
    """The admin kubeconfig's server, CA and client credentials (PEM)."""

    server: str
    ca_pem: bytes
    certificate_pem: bytes
    key_pem: bytes

    @classmethod
    def load(cls, path: Path) -> _Admin | None:
        """The kubeconfig ``up`` wrote at ``path``; None if there is none (or it is not
        one of ours)."""
        try:
            config = json.loads(path.read_text())
            cluster = config["clusters"][0]["cluster"]
            user = config["users"][0]["user"]
            return cls(
                cluster["server"],
                base64.b64decode(cluster["certificate-authority-data"]),
                base64.b64decode(user["client-certificate-data"]),
                base64.b64decode(user["client-key-data"]),
            )
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return None

    def context(self) -> ssl.SSLContext:
        """TLS verified against the cluster's CA, with the admin's certificate."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        with tempfile.TemporaryDirectory(prefix="roleserve-kubeconfig-") as directory:
            chain = Path(directory) / "admin.pem"
            chain.touch(mode=0o600)
            chain.write_bytes(self.certificate_pem + self.key_pem)
            context.load_cert_chain(chain)
        return context


async def node_conditions(admin: _Admin) -> dict[str, str]:
    """Each Node's Ready condition (``True``, ``False``, ``Unknown``) by name, as the
    apiserver in ``admin`` reports it (``GET /api/v1/nodes``).

    :raises OSError: the apiserver cannot be reached or does not answer 200 with JSON.
    """
    host, _, port = admin.server.removeprefix("https://").rpartition(":")
    host = host.strip("[]")
    # HTTP/1.0: the answer ends with the connection, never chunked.
    request = (
        f"GET /api/v1/nodes HTTP/1.0\r\nHost: {host}:{port}\r\nAccept: application/json\r\n\r\n"
    )
    try:
        with anyio.fail_after(PROBE_TIMEOUT):
            stream = await anyio.connect_tcp(
                host,
                int(port),
                ssl_context=admin.context(),
                tls_hostname=host,
                tls_standard_compatible=False,
            )
            async with stream:
                await stream.send(request.encode())
                answer = bytearray()
                try:
                    while True:
                        answer += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass
    except TimeoutError:
        raise OSError(f"{admin.server} did not answer within {PROBE_TIMEOUT:g} s") from None
    head, _, body = bytes(answer).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        raise OSError(f"{admin.server}/api/v1/nodes answered {head[:40]!r}")
    try:
        items = json.loads(body)["items"]
    except (ValueError, KeyError) as exc:
        raise OSError(f"{admin.server}/api/v1/nodes answered no list of Nodes: {exc}") from None
    return {item["metadata"]["name"]: _ready_condition(item) for item in items}


def _ready_condition(node: Mapping[str, Any]) -> str:
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready":
            return str(condition.get("status", "Unknown"))
    return "Unknown"


_READY_WORDS = {"True": "Ready", "False": "NotReady"}


def _cell(member: ClusterMember, conditions: dict[str, str] | None, api: bool | None) -> str:
    """``member``'s K8S cell (module docstring)."""
    parts = []
    if WORKER in member.roles:
        if conditions is None:
            parts.append("?")
        elif member.node_id in conditions:
            parts.append(_READY_WORDS.get(conditions[member.node_id], "Unknown"))
        else:
            parts.append("no Node")
    if api is not None:
        parts.append("api ready" if api else "api not ready")
    return ", ".join(parts) or "-"


async def _apiserver_ready(member: ClusterMember, ca_pem: bytes | None) -> bool:
    """Whether ``member``'s kube-apiserver answers ``/readyz`` with 200 within
    ``CELL_PATIENCE``: a hung one must not hold up the table (nor the others' cells)."""
    with anyio.move_on_after(CELL_PATIENCE):
        return await probe(Health(member.address, APISERVER_PORT, "/readyz", ca_pem=ca_pem))
    return False


def _controllers(view: ClusterView) -> list[ClusterMember]:
    """The controllers; every node when no node's roles are known (the leader did not
    answer, or the nodes are stopped): a silent leader is no reason to say "no binaries"."""
    if not any(member.roles for member in view.nodes):
        return list(view.nodes)
    return [member for member in view.nodes if CONTROLLER in member.roles]


def _workers(view: ClusterView) -> list[ClusterMember]:
    return [member for member in view.nodes if WORKER in member.roles and member.node_id]


async def _fail_if_failed_for_good(view: ClusterView, waiting: list[ClusterMember]) -> None:
    """:raises KubernetesNotReadyError: a runnable of a waiting node's kubelet or container
    runtime is DEAD for good (its own error in the line), so its Node will never be Ready."""
    for member in waiting:
        for top in WORKER_DNS:
            for seen in await view.runnables(member, top):
                if seen.state == "DEAD" and seen.final:
                    why = seen.last_error or seen.note
                    raise KubernetesNotReadyError(
                        f"Kubernetes: n{member.index}'s Node will not be Ready: {seen.dn} "
                        f"failed for good: {why}"
                    )


class KubernetesExtension:
    """The ``roleserve.cluster`` extension (``roleserve_core.cluster_extension``)."""

    column = "K8S"

    async def settle(self, view: ClusterView) -> None:
        """Wait for a ready apiserver, write the kubeconfig, wait for every Node Ready;
        with no binaries, say how to build them instead."""
        if not binaries_present(view):
            view.progress(BUILD_HINT)
            return
        path = view.directory / KUBECONFIG
        view.progress("Kubernetes: waiting for a kube-apiserver to be ready")
        server = await self._write_kubeconfig(view, path)
        view.progress(f"Kubernetes: {server} is ready; wrote an admin kubeconfig to {path}")
        admin = _Admin.load(path)
        assert admin is not None  # just written
        workers = _kubelets(view)
        shortage = inotify_shortage()
        if shortage is not None:
            view.progress(shortage)
        view.progress(f"Kubernetes: waiting until every Node is Ready ({len(workers)})")
        await self._until_ready(view, admin, workers)

    async def _write_kubeconfig(self, view: ClusterView, path: Path) -> str:
        """Through ``ctl kubeconfig``'s own code, once a controller's apiserver is ready."""
        from roleserve_core import CtlError, open_ctl_session
        from roleserve_kubernetes.ctl import write_kubeconfig

        deadline = time.monotonic() + READY_TIMEOUT
        why = "no kube-apiserver answers /readyz with 200"
        while time.monotonic() < deadline:
            if any([await _apiserver_ready(member, None) for member in _apiservers(view)]):
                try:
                    async with open_ctl_session(view.access(), 30.0) as session:
                        written = await write_kubeconfig(session, path, force=True)
                    return written.servers[0]
                except CtlError as exc:
                    why = str(exc)
            else:
                why = "no kube-apiserver answers /readyz with 200"
            await anyio.sleep(POLL)
        raise KubernetesNotReadyError(
            f"Kubernetes: no kube-apiserver was ready after {READY_TIMEOUT:g} s ({why}); "
            "`roleserve ctl tree n1` says what the controller runs"
        )

    async def _until_ready(
        self, view: ClusterView, admin: _Admin, workers: list[ClusterMember]
    ) -> None:
        """Until the apiserver says every worker's Node is Ready; at once, a worker whose
        container runtime or kubelet failed for good (restarting will not bring it)."""
        deadline = time.monotonic() + READY_TIMEOUT
        waiting: list[ClusterMember] = []
        said = ""
        looked = 0.0
        while time.monotonic() < deadline:
            conditions: dict[str, str] | None
            try:
                conditions = await node_conditions(admin)
            except OSError:
                conditions = None
            waiting = [
                member
                for member in workers
                if conditions is None or conditions.get(member.node_id or "") != "True"
            ]
            if not waiting:
                return
            said = ", ".join(f"n{m.index}: {_cell(m, conditions, None)}" for m in waiting)
            if time.monotonic() - looked >= LOOK_EVERY:
                looked = time.monotonic()
                await _fail_if_failed_for_good(view, waiting)
            await anyio.sleep(POLL)
        first = waiting[0]
        kubelet = await view.runnables(first, KUBELET_DN)
        shown = f" ({kubelet[0].state}: {kubelet[0].note})" if kubelet and kubelet[0].note else ""
        raise KubernetesNotReadyError(
            f"Kubernetes: not every Node was Ready after {READY_TIMEOUT:g} s ({said}); "
            f"n{first.index}'s kubelet{shown}: `roleserve ctl tree n{first.index}` says more"
        )

    async def cells(self, view: ClusterView) -> Mapping[str, str] | None:
        """Each node's K8S cell; None (no column) without the binaries."""
        if not binaries_present(view):
            return None
        admin = _Admin.load(view.directory / KUBECONFIG)
        ca_pem = admin.ca_pem if admin is not None else None
        conditions: dict[str, str] | None = None
        ready: dict[int, bool] = {}

        async def read_nodes() -> None:
            nonlocal conditions
            if admin is not None:
                with contextlib.suppress(OSError), anyio.move_on_after(CELL_PATIENCE):
                    conditions = await node_conditions(admin)

        async def probe_apiserver(member: ClusterMember) -> None:
            ready[member.index] = await _apiserver_ready(member, ca_pem)

        async with anyio.create_task_group() as tasks:  # at once: each may take seconds
            tasks.start_soon(read_nodes)
            for member in _controllers(view):
                tasks.start_soon(probe_apiserver, member)
        return {
            member.node_id: _cell(member, conditions, ready.get(member.index))
            for member in view.nodes
            if member.node_id is not None
        }

    def hint(self, view: ClusterView) -> str | None:
        """The kubectl command that lists the nodes; without the binaries, how to build
        them."""
        if not binaries_present(view):
            return BUILD_HINT
        path = view.directory / KUBECONFIG
        return f"list Kubernetes' nodes with: {kubectl()} --kubeconfig {path} get nodes"


EXTENSION = KubernetesExtension()
"""What the entry point names."""
