"""``roleserve ctl kubeconfig --out FILE``: an admin kubeconfig for the cluster's Kubernetes.

::

    new key (here; it never leaves) ─▶ CSR ─▶ KubernetesCertificates.IssueAdminCertificate
        (leading curator; owner scope: MANAGE_CREDENTIALS)
    ─▶ certificate (CN = the caller, O system:masters, 30 days), the Kubernetes CA, the
       controllers' apiservers (host:6443)
    ─▶ the first of them whose /readyz answers 200 (TLS verified against the CA; none:
       refused in one line, nothing written) ─▶ FILE, mode 0600, written atomically

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
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roleserve_core import EXIT_USAGE, CtlError, add_ctl_command

if TYPE_CHECKING:
    from roleserve_core import CtlSession

__all__ = ["CLUSTER_NAME", "add_parsers", "admin_kubeconfig", "kubeconfig", "write_kubeconfig"]

CLUSTER_NAME = "roleserve"
"""The name of the cluster, user (``<name>-admin``) and context in the kubeconfig."""


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
            "and write a kubeconfig (JSON, which kubectl reads as YAML) naming the first "
            "controller whose apiserver (port 6443) is ready to FILE, mode 0600. With no "
            "ready apiserver, nothing is written (exit 1)."
        ),
    )
    parser.add_argument("--out", required=True, metavar="FILE", type=Path, help="where to")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    parser.add_argument(
        "--server",
        metavar="URL",
        help="the apiserver to name, not checked (default: https://<first controller "
        "whose apiserver is ready>:6443)",
    )


def admin_kubeconfig(
    server: str, ca_pem: bytes, certificate_pem: bytes, key_pem: bytes
) -> dict[str, Any]:
    """A kubeconfig of one cluster, user and context, every credential inline."""

    def data(pem: bytes) -> str:
        return base64.b64encode(pem).decode()

    user = f"{CLUSTER_NAME}-admin"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": data(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": data(certificate_pem),
                    "client-key-data": data(key_pem),
                },
            }
        ],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
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
    server, until = await write_kubeconfig(session, args.out, force=args.force, server=args.server)
    print(
        f"wrote an admin kubeconfig for {server} to {args.out} (valid until "
        f"{until:%Y-%m-%d %H:%M} UTC); use it with: kubectl --kubeconfig {args.out} get nodes"
    )


async def write_kubeconfig(
    session: CtlSession, out: Path, *, force: bool = False, server: str | None = None
) -> tuple[str, datetime.datetime]:
    """Write an admin kubeconfig to ``out`` (mode 0600, atomically): what ``ctl kubeconfig``
    does, also for ``cluster up`` (``localcluster``). The apiserver it names and when its
    certificate expires.

    :param server: the apiserver's URL, not checked; None: the first ready one.
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
    server = server or await _ready_server(answer.apiserver_endpoints, answer.ca_certificate)
    config = admin_kubeconfig(
        server, answer.ca_certificate, answer.certificate, private_key_to_pem(key)
    )
    _check_out(out, force)  # again: the call took time
    try:
        write_atomically(out, json.dumps(config, indent=2).encode() + b"\n", mode=0o600)
    except OSError as exc:
        raise CtlError(f"cannot write {out}: {exc.strerror or exc}") from None
    return server, datetime.datetime.fromtimestamp(answer.not_after, datetime.UTC)


async def _ready_server(endpoints: Any, ca_pem: bytes) -> str:
    """``https://`` + the first apiserver endpoint (``host:port``) that answers ``/readyz``
    with 200 over TLS verified against ``ca_pem``, as kubectl will check it.

    :raises CtlError: if there is no endpoint, or none is ready (each one's reason).
    """
    from roleserve_kubernetes.plans import Health
    from roleserve_kubernetes.probe import probe_failure

    if not endpoints:
        raise CtlError(
            "no node is an UP kubernetes_controller with an address, so there is no "
            "apiserver to name; assign the role (ctl roles set NODE kubernetes_controller) "
            "or give --server URL"
        )
    failures = []
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        health = Health(host.strip("[]"), int(port), "/readyz", ca_pem=ca_pem)
        failure = await probe_failure(health)
        if failure is None:
            return f"https://{endpoint}"
        failures.append(f"{endpoint}: {failure}")
    raise CtlError(
        f"no kube-apiserver is ready ({'; '.join(failures)}), so a kubeconfig would name "
        "none that serves; `roleserve ctl tree NODE` on a controller says why (e.g. "
        "kube-apiserver not found), or give --server URL"
    )
