"""The Node's InternalIP on a node with a loopback address, which the kubelet refuses.

The kubelet rejects a loopback ``--node-ip`` ("nodeIP can't be loopback address",
``validateNodeIP``) and then leaves the Node's addresses alone (its address setter fails
before it touches them), so without help the Node of a local cluster's node has no
address, the apiserver cannot reach the kubelet, and ``kubectl logs``/``exec`` fail. The
runnable ``node_address`` (next to the kubelet, on loopback nodes only) sets them itself,
with the kubelet's own credentials, which the node authorizer and NodeRestriction allow
on its own Node's status:

::

    PATCH /api/v1/nodes/<node ID>/status   (merge patch, as system:node:<node ID>)
        {"status": {"addresses": [{"type": "InternalIP", "address": <node address>},
                                  {"type": "Hostname", "address": <node ID>}]}}
    200: again every KEEP_INTERVAL (a Node registered anew has none)
    else (no Node yet, apiserver not answering): again after RETRY_INTERVAL, reason as note

The apiserver then reaches the kubelet at ``<node address>:10250``, which its serving
certificate (issued by the curator for that address) names.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import ssl
import urllib.parse
from pathlib import Path

import anyio

from roleserve_core import RunContext, Runnable, write_atomically
from roleserve_kubernetes.plans import KEY_MODE, KubeletInputs

__all__ = ["KEEP_INTERVAL", "RETRY_INTERVAL", "address_patch", "node_address_runnable"]

KEEP_INTERVAL = 60.0
"""Seconds between two patches once one succeeded (a no-op for the apiserver)."""
RETRY_INTERVAL = 2.0
"""Seconds before trying again while the Node is not registered or the apiserver does not
answer."""
TIMEOUT = 10.0

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_patch(node_id: str, address: IPAddress) -> bytes:
    """The merge patch that gives the Node its addresses."""
    addresses = [
        {"type": "InternalIP", "address": str(address)},
        {"type": "Hostname", "address": node_id},
    ]
    return json.dumps({"status": {"addresses": addresses}}).encode()


def node_address_runnable(inputs: KubeletInputs) -> Runnable:
    """The runnable ``node_address`` for the kubelet of ``inputs``; see the module doc."""

    async def run(ctx: RunContext) -> None:
        certificate, key = await anyio.to_thread.run_sync(_client_files, inputs)
        ctx.signal_healthy()
        patch = address_patch(inputs.node_id, inputs.address)
        done = False
        while True:
            failure = await anyio.to_thread.run_sync(
                _patch, inputs, certificate, key, patch, abandon_on_cancel=True
            )
            if failure is None and not done:
                ctx.log.info("the Node's InternalIP is %s", inputs.address)
                ctx.set_note(f"the Node's InternalIP is {inputs.address} (set here)")
            elif failure is not None:
                ctx.set_note(f"cannot set the Node's address yet: {failure}")
            done = failure is None
            await anyio.sleep(KEEP_INTERVAL if done else RETRY_INTERVAL)

    return run


def _client_files(inputs: KubeletInputs) -> tuple[Path, Path]:
    """The kubelet's client pair as files (``ssl`` loads a certificate from files only)."""
    directory = inputs.directory / "node-address"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    certificate, key = directory / "client.pem", directory / "client-key.pem"
    write_atomically(certificate, inputs.client.certificate_pem or b"", KEY_MODE)
    write_atomically(key, inputs.client.key_pem, KEY_MODE)
    return certificate, key


def _patch(inputs: KubeletInputs, certificate: Path, key: Path, patch: bytes) -> str | None:
    """PATCH the Node's status; None if the apiserver took it, else why not."""
    url = urllib.parse.urlsplit(inputs.apiserver)
    try:
        context = ssl.create_default_context(cadata=inputs.ca_pem.decode())
        context.load_cert_chain(certificate, key)
        connection = http.client.HTTPSConnection(
            url.hostname or "", url.port, context=context, timeout=TIMEOUT
        )
        try:
            connection.request(
                "PATCH",
                f"/api/v1/nodes/{inputs.node_id}/status",
                patch,
                {"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
            )
            response = connection.getresponse()
            body = response.read(4096)
        finally:
            connection.close()
    except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
        return f"{inputs.apiserver}: {exc}"
    if response.status == 200:
        return None
    return f"the apiserver answered {response.status}: {_message(body)}"


def _message(body: bytes) -> str:
    """The ``message`` of a Kubernetes Status, else the body's start."""
    try:
        return str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")
