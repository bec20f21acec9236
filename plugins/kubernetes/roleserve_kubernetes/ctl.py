"""``roleserve ctl kubeconfig --out FILE``: an admin kubeconfig for the cluster's Kubernetes.

::

    new key (here; it never leaves) ─▶ CSR ─▶ KubernetesCertificates.IssueAdminCertificate
        (leading curator; owner scope: MANAGE_CREDENTIALS)
    ─▶ certificate (CN = the caller, O system:masters, 30 days), the Kubernetes CA, the
       controllers' apiservers (host:6443)
    ─▶ every one of them whose /readyz answers 200 (asked at once; TLS verified against
       the CA; none: refused in one line, nothing written)
    ─▶ FILE, mode 0600, written atomically: one cluster and one context per ready
       apiserver, each named roleserve-<host>, one user roleserve-admin; the current
       context is the first (the curator lists the controllers by node ID)

Registered with the core's ``ctl`` through the entry-point group ``roleserve.ctl``, so
the core never imports this plugin, and loaded only when ``kubeconfig`` is run.

The kubeconfig is JSON: JSON is YAML, kubectl reads it, and it needs no YAML library.
An existing FILE is refused unless ``--force``: a kubeconfig often holds other clusters'
credentials, which overwriting would lose.

Why ctl asks the apiservers themselves whether they are ready: a controller node is UP
whether or not its kube-apiserver runs (the binary may be absent), and a kubeconfig naming
one that does not serve only moves the failure to kubectl's "connection refused". The
question ctl asks is the one kubectl will, from where kubectl will run. ``--server URL``
is the operator's choice (a load balancer, say) and is not asked.

Why a context per apiserver rather than the first ready one alone: Kubernetes clients take
one server per cluster entry, and a controller that goes away would leave a kubeconfig of
one server useless; with every ready one named, ``kubectl --context roleserve-<host>``
reaches another without asking ctl again. The names carry the host because ``kubectl
config get-contexts`` shows no server.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roleserve_core import EXIT_USAGE, CtlError, add_ctl_command

if TYPE_CHECKING:
    from roleserve_core import CtlSession

__all__ = [
    "CLUSTER_NAME",
    "WrittenKubeconfig",
    "add_parsers",
    "admin_kubeconfig",
    "context_name",
    "kubeconfig",
    "write_kubeconfig",
]

CLUSTER_NAME = "roleserve"
"""The prefix of each cluster's and context's name (``roleserve-<host>``), and of the
user's (``roleserve-admin``) in the kubeconfig."""


def add_parsers(commands: Any) -> None:
    """Register ``kubeconfig`` (the ``roleserve.ctl`` entry point)."""
    parser = add_ctl_command(
        commands,
        "kubeconfig",
        kubeconfig,
        help="write an admin kubeconfig for the cluster's Kubernetes (owner only)",
        description=(
            "Generate a key here, have the leader issue a Kubernetes cluster-admin "
            "certificate for it (O=system:masters, valid 30 days; owner credentials only), "
            "and write a kubeconfig (JSON, which kubectl reads as YAML) to FILE, mode 0600, "
            "with a context roleserve-<host> for each controller whose apiserver (port "
            "6443) is ready, the first one current. With no ready apiserver, nothing is "
            "written (exit 1)."
        ),
    )
    parser.add_argument("--out", required=True, metavar="FILE", type=Path, help="where to")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    parser.add_argument(
        "--server",
        metavar="URL",
        help="the one apiserver to name, not checked (default: https://<host>:6443 of "
        "every controller whose apiserver is ready)",
    )


def context_name(server: str) -> str:
    """``roleserve-<host>``: the name of ``server``'s cluster and context."""
    host = urllib.parse.urlsplit(server).hostname or server
    return f"{CLUSTER_NAME}-{host}"


def admin_kubeconfig(
    servers: str | Sequence[str], ca_pem: bytes, certificate_pem: bytes, key_pem: bytes
) -> dict[str, Any]:
    """A kubeconfig with one cluster and one context per server (``context_name``), one
    user, every credential inline; the current context is the first server's.

    :param servers: the apiservers' URLs (one URL: that one alone).
    """

    def data(pem: bytes) -> str:
        return base64.b64encode(pem).decode()

    names = [servers] if isinstance(servers, str) else list(servers)
    user = f"{CLUSTER_NAME}-admin"
    clusters = [
        {
            "name": context_name(server),
            "cluster": {"server": server, "certificate-authority-data": data(ca_pem)},
        }
        for server in names
    ]
    contexts = [
        {"name": context_name(server), "context": {"cluster": context_name(server), "user": user}}
        for server in names
    ]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": data(certificate_pem),
                    "client-key-data": data(key_pem),
                },
            }
        ],
        "contexts": contexts,
        "current-context": context_name(names[0]),
        "preferences": {},
    }


def _check_out(path: Path, force: bool) -> None:
    """:raises CtlError: if ``path`` exists (without ``force``) or is a directory."""
    if path.is_dir():
        raise CtlError(f"{path} is a directory; give --out a file", EXIT_USAGE)
    if path.exists() and not force:
        raise CtlError(f"{path} exists; pass --force to overwrite it", EXIT_USAGE)


async def kubeconfig(session: CtlSession, args: argparse.Namespace) -> None:
    """``ctl kubeconfig --out FILE [--force] [--server URL]``."""
    written = await write_kubeconfig(session, args.out, force=args.force, server=args.server)
    servers = written.servers
    others = [context_name(server) for server in servers[1:]]
    also = f"; also {', '.join(others)}" if others else ""
    skipped = f"; left out, not ready: {'; '.join(written.left_out)}" if written.left_out else ""
    print(
        f"wrote an admin kubeconfig for {servers[0]} (context {context_name(servers[0])}"
        f"{also}) to {args.out} (valid until {written.until:%Y-%m-%d %H:%M} UTC){skipped}; "
        f"use it with: kubectl --kubeconfig {args.out} get nodes"
    )


@dataclass(frozen=True)
class WrittenKubeconfig:
    """What ``write_kubeconfig`` wrote."""

    servers: list[str]
    """The apiservers it names, the current context's first."""
    left_out: list[str]
    """``endpoint: reason`` of each controller's apiserver left out, not ready."""
    until: datetime.datetime
    """When its certificate expires."""


async def write_kubeconfig(
    session: CtlSession, out: Path, *, force: bool = False, server: str | None = None
) -> WrittenKubeconfig:
    """Write an admin kubeconfig to ``out`` (mode 0600, atomically): what ``ctl kubeconfig``
    does, also for ``cluster up`` (``localcluster``).

    :param server: the one apiserver's URL, not checked; None: every ready one.
    :raises CtlError: ``out`` exists (without ``force``) or cannot be written, or no
        apiserver is ready (nothing written then).
    """
    from roleserve_core import write_atomically
    from roleserve_core.identity import generate_key, private_key_to_pem, signing_request
    from roleserve_kubernetes.proto import kubernetes_pb2, kubernetes_pb2_grpc

    _check_out(out, force)
    assert session.channel is not None  # a session with a leader has its channel
    key = generate_key()
    stub = kubernetes_pb2_grpc.KubernetesCertificatesStub(session.channel)
    answer = await session.call(
        "issue an admin certificate",
        stub.IssueAdminCertificate,
        kubernetes_pb2.IssueAdminCertificateRequest(csr=signing_request(key, "kubeconfig")),
    )
    servers: list[str] = [server] if server else []
    left_out: list[str] = []
    if not server:
        servers, left_out = await _ready_servers(answer.apiserver_endpoints, answer.ca_certificate)
    config = admin_kubeconfig(
        servers, answer.ca_certificate, answer.certificate, private_key_to_pem(key)
    )
    _check_out(out, force)  # again: the call took time
    try:
        write_atomically(out, json.dumps(config, indent=2).encode() + b"\n", mode=0o600)
    except OSError as exc:
        raise CtlError(f"cannot write {out}: {exc.strerror or exc}") from None
    until = datetime.datetime.fromtimestamp(answer.not_after, datetime.UTC)
    return WrittenKubeconfig(servers, left_out, until)


async def _ready_servers(endpoints: Any, ca_pem: bytes) -> tuple[list[str], list[str]]:
    """``https://`` + each apiserver endpoint (``host:port``) that answers ``/readyz`` with
    200 over TLS verified against ``ca_pem``, as kubectl will check it, in the order
    given; and ``endpoint: reason`` of each one that does not. All are asked at once.

    :raises CtlError: if there is no endpoint, or none is ready (each one's reason).
    """
    import anyio

    from roleserve_kubernetes.plans import Health
    from roleserve_kubernetes.probe import probe_failure

    if not endpoints:
        raise CtlError(
            "no node is an UP kubernetes_controller with an address, so there is no "
            "apiserver to name; assign the role (ctl roles set NODE kubernetes_controller) "
            "or give --server URL"
        )
    failures: dict[str, str | None] = {}

    async def ask(endpoint: str) -> None:
        host, _, port = endpoint.rpartition(":")
        health = Health(host.strip("[]"), int(port), "/readyz", ca_pem=ca_pem)
        failures[endpoint] = await probe_failure(health)

    async with anyio.create_task_group() as tasks:
        for endpoint in endpoints:
            tasks.start_soon(ask, endpoint)
    ready = [f"https://{endpoint}" for endpoint in endpoints if failures[endpoint] is None]
    left_out = [f"{endpoint}: {failures[endpoint]}" for endpoint in endpoints if failures[endpoint]]
    if not ready:
        raise CtlError(
            f"no kube-apiserver is ready ({'; '.join(left_out)}), so a kubeconfig would name "
            "none that serves; `roleserve ctl tree NODE` on a controller says why (e.g. "
            "kube-apiserver not found), or give --server URL"
        )
    return ready, left_out
