"""The few Kubernetes API calls the plugin makes itself, over HTTPS with a client
certificate: list the Node objects, delete one.

::

    KubeAPI(server, ca_pem, certificate, key)    one aiohttp session, TLS verified
      ├─ node_names()     GET    /api/v1/nodes            → every Node's name
      └─ delete_node(n)   DELETE /api/v1/nodes/<n>        → True; 404 → False (gone already)
    any other answer, or none in REQUEST_TIMEOUT ──▶ KubeAPIError (expected: retried)

Why aiohttp, and not the official ``kubernetes`` client or client-go: aiohttp is already
a dependency of the workspace (the metrics plugin serves and scrapes with it), speaks
asyncio as the node does, and two calls need nothing more. The official client is
synchronous (urllib3), code-generated for every API group and brings a dozen packages
(PyYAML, google-auth, websocket-client, requests, ...) into every node; it is used in the
tests, as an operator would use it, to prove that ``ctl kubeconfig`` works with it.
"""

from __future__ import annotations

import ssl
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from roleserve_kubernetes.errors import KubeAPIError

__all__ = ["REQUEST_TIMEOUT", "KubeAPI"]

REQUEST_TIMEOUT = 30.0
"""Seconds one request may take: the apiserver on the node's own address answers in
milliseconds, a list of 10,000 Nodes in about a second."""


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
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeAPI:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._context),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
        )
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

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
        assert self._session is not None, "use KubeAPI as `async with`"
        try:
            async with self._session.request(method, self.server + path) as answer:
                if answer.status == 404 and absent_ok:
                    return None
                if answer.status >= 300:
                    reason = (await answer.text())[:200].strip()
                    raise KubeAPIError(
                        f"cannot {what} at {self.server}: {method} {path} answered "
                        f"{answer.status} ({reason})"
                    )
                found: dict[str, Any] = await answer.json()
                return found
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            why = str(exc) or type(exc).__name__
            raise KubeAPIError(f"cannot {what} at {self.server}: {why}") from None
