"""The few Kubernetes API calls the plugin makes itself, over HTTPS with a client
certificate: list the Node objects, delete one.

::

    KubeAPI(server, ca_pem, certificate, key)    one TLS context, the server verified
      ├─ node_names()     GET    /api/v1/nodes            → every Node's name
      └─ delete_node(n)   DELETE /api/v1/nodes/<n>        → True; 404 → False (gone already)
    any other answer, or none in REQUEST_TIMEOUT ──▶ KubeAPIError (expected: retried)

Why the standard library's ``http.client`` (in a worker thread, a connection per call), and
not aiohttp or the official ``kubernetes`` client or client-go: two calls now and then need
nothing more, and ``http.client`` is already in every node process (``prometheus_client``
loads it), while importing aiohttp cost a controller node ~10 MiB of RSS
(``benchmarks/node_weight.py``). The official client is synchronous (urllib3),
code-generated for every API group and brings a dozen packages (PyYAML, google-auth,
websocket-client, requests, ...) into every node; it is used in the tests, as an operator
would use it, to prove that ``ctl kubeconfig`` works with it.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio.to_thread

from roleserve_kubernetes.errors import KubeAPIError

__all__ = ["REQUEST_TIMEOUT", "KubeAPI"]

REQUEST_TIMEOUT = 30.0
"""Seconds the connection, and each wait for the apiserver's bytes, may take: the
apiserver on the node's own address answers in milliseconds, a list of 10,000 Nodes in
about a second."""


class KubeAPI:
    """A client of one apiserver; use it as ``async with``."""

    def __init__(self, server: str, ca_pem: bytes, certificate: Path, key: Path) -> None:
        """:param server: the apiserver's URL (``https://host:6443``).
        :param ca_pem: the CA its serving certificate chains to.
        :param certificate: the client certificate's file (PEM); who the client is.
        :param key: its private key's file (PEM, mode 0600).
        """
        self.server = server
        context = ssl.create_default_context(cadata=ca_pem.decode())
        context.load_cert_chain(certificate, key)
        self._context = context
        self._url = urllib.parse.urlsplit(server)

    async def __aenter__(self) -> KubeAPI:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Nothing to close: each call has a connection of its own."""

    async def node_names(self) -> list[str]:
        """The names of every Node object."""
        listed = await self._request("GET", "/api/v1/nodes", "list the Nodes") or {}
        return [str(item["metadata"]["name"]) for item in listed.get("items", [])]

    async def delete_node(self, name: str) -> bool:
        """Delete the Node ``name``; False if there was none (another did it first)."""
        path = "/api/v1/nodes/" + urllib.parse.quote(name, safe="")
        deleted = await self._request("DELETE", path, f"delete the Node {name}", absent_ok=True)
        return deleted is not None

    async def _request(
        self, method: str, path: str, what: str, *, absent_ok: bool = False
    ) -> dict[str, Any] | None:
        """The JSON answer to ``method path``; None for a 404 if ``absent_ok``.

        :raises KubeAPIError: naming ``what``, the server and why.
        """
        try:
            status, body = await anyio.to_thread.run_sync(self._exchange, method, path)
            if status == 404 and absent_ok:
                return None
            if status >= 300:
                reason = body.decode(errors="replace")[:200].strip()
                raise KubeAPIError(
                    f"cannot {what} at {self.server}: {method} {path} answered {status} ({reason})"
                )
            found: dict[str, Any] = json.loads(body)
            return found
        except (OSError, http.client.HTTPException, ValueError) as exc:
            why = str(exc) or type(exc).__name__
            raise KubeAPIError(f"cannot {what} at {self.server}: {why}") from None

    def _exchange(self, method: str, path: str) -> tuple[int, bytes]:
        """``method path`` on a connection of its own (blocking: a worker thread)."""
        connection = http.client.HTTPSConnection(
            self._url.hostname or "",
            self._url.port,
            context=self._context,
            timeout=REQUEST_TIMEOUT,
        )
        try:
            connection.request(method, path, headers={"Accept": "application/json"})
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()
