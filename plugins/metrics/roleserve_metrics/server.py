"""The HTTPS server: ``/metrics/<name>`` for holders of a metrics-scoped user certificate.

::

    TLS (tls_context): the node certificate; a client certificate is required and verified
        against the cluster CA (none, or one of another CA: the handshake fails)
      └─ admission (a middleware, before every route, discovery's too): the certificate
         must be a user's whose scope holds SCRAPE_METRICS (``metrics`` or ``owner``),
         not revoked; a node's certificate is refused ─▶ 403 with one line why
           └─ /metrics/<name>: GET (and HEAD) only, else 405; unknown name 404
                ├─ a collector: generate_latest(its registry)
                └─ a URL: proxied; no answer ─▶ 502 naming the exporter,
                   no answer within the timeout ─▶ 504 naming it

``build_app`` returns the ``aiohttp.web.Application``; another module adds routes to it
with ``app.router.add_routes(...)`` before it runs (discovery's ``/discovery``). Admission
applies to every route.

The node certificate renews itself (``workers/renewal.py``): ``TlsIdentity.load`` loads
new credentials into the same ``ssl.SSLContext``, and handshakes from then on present them;
connections already open keep the certificate they started with.
"""

from __future__ import annotations

import functools
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import anyio.to_thread
from aiohttp import web
from cryptography import x509
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from roleserve_core import authorization_pb2
from roleserve_core.identity import NodeCredentials, certificate_to_pem
from roleserve_core.rpc import NodePeer, PeerClassifier, UserPeer
from roleserve_metrics.exporters import Exporter, ExporterTable

__all__ = [
    "ADMISSION",
    "EXPORTERS",
    "Admission",
    "TlsIdentity",
    "build_app",
    "peer_certificate",
]

EXPORTERS = web.AppKey("exporters", ExporterTable)
"""The app's exporter table."""

Revoked = Callable[[int], bool]
"""Whether a user certificate's serial is revoked."""


class TlsIdentity:
    """The server's ``ssl.SSLContext``: the node's certificate, clients verified against
    the cluster CA. ``load`` swaps in renewed credentials for the handshakes that follow."""

    def __init__(self, credentials: NodeCredentials) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(
            cadata=certificate_to_pem(credentials.ca_certificate).decode()
        )
        self.context = context
        self.ca = credentials.ca_certificate
        self.certificate = credentials.certificate
        self.load(credentials)

    def load(self, credentials: NodeCredentials) -> None:
        """Present ``credentials`` (the same CA) from the next handshake on.

        ``ssl`` loads a key only from a file: both go to a private temporary directory,
        removed at once.
        """
        with tempfile.TemporaryDirectory(prefix="roleserve-metrics-tls-") as directory:
            certificate, key = Path(directory, "cert.pem"), Path(directory, "key.pem")
            certificate.write_bytes(credentials.certificate_pem)
            descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(credentials.key_pem)
            self.context.load_cert_chain(certificate, key)
        self.certificate = credentials.certificate


def peer_certificate(request: web.Request) -> bytes | None:
    """The DER client certificate of ``request``'s connection, if it presented one."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


class Admission:
    """Who may scrape: a verified user certificate whose scope holds SCRAPE_METRICS and
    whose serial is not revoked. Verdicts are cached by certificate."""

    def __init__(self, ca: x509.Certificate, revoked: Revoked | None = None) -> None:
        self.classifier = PeerClassifier(ca)
        self.revoked = revoked
        self._refusal = functools.lru_cache(maxsize=1024)(self._refusal_uncached)

    def refusal(self, der: bytes | None) -> str | None:
        """Why the holder of ``der`` is refused, one line; None if let in."""
        if der is None:
            return "a client certificate of the cluster is required"
        reason, serial = self._refusal(der)
        if reason is None and self.revoked is not None and self.revoked(serial):
            return "the client certificate is revoked"
        return reason

    def _refusal_uncached(self, der: bytes) -> tuple[str | None, int]:
        certificate = x509.load_der_x509_certificate(der)
        peer = self.classifier.classify(certificate)
        if isinstance(peer, UserPeer):
            if authorization_pb2.SCRAPE_METRICS in peer.permissions:
                return None, peer.serial
            return (
                f"the user certificate of {peer.identity!r} has scope {peer.scope!r}, which "
                "may not scrape metrics (scopes metrics and owner may)",
                peer.serial,
            )
        if isinstance(peer, NodePeer):
            return "a node certificate may not scrape metrics; use a user certificate", 0
        return "not a user certificate of this cluster", 0


ADMISSION = web.AppKey("admission", Admission)


@web.middleware
async def _admit(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    refusal = request.app[ADMISSION].refusal(peer_certificate(request))
    if refusal is not None:
        return web.Response(status=403, text=refusal + "\n")
    return await handler(request)


class _Collected:
    """Metric families already collected, as a registry ``generate_latest`` can render."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


async def render(registry: CollectorRegistry) -> bytes:
    """``registry`` in the text exposition format: collected on the event loop, where the
    core's state lives and changes, then rendered in a worker thread, so that a large tree
    (5 MB of text for 10,000 runnables) does not hold the node's event loop for the whole
    formatting."""
    families = list(registry.collect())
    return await anyio.to_thread.run_sync(generate_latest, _Collected(families))


SESSION = web.AppKey("session", aiohttp.ClientSession)
"""The client session proxied requests use: the app's own, closed with it."""


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    app[SESSION] = aiohttp.ClientSession()
    yield
    await app[SESSION].close()


def build_app(
    exporters: ExporterTable, admission: Admission, *, timeout: float = 10.0
) -> web.Application:
    """The application: admission, then ``/metrics/<name>`` (see the module docstring).

    :param timeout: seconds a proxied exporter may take (then 504).
    """
    app = web.Application(middlewares=[_admit])
    app[EXPORTERS] = exporters
    app[ADMISSION] = admission
    app.cleanup_ctx.append(_client_session)
    limit = aiohttp.ClientTimeout(total=timeout)

    async def metrics(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, headers={"Allow": "GET"}, text="GET only\n")
        exporter = request.app[EXPORTERS].get(name)
        if exporter is None:
            known = ", ".join(request.app[EXPORTERS].names())
            return web.Response(status=404, text=f"no exporter {name!r}; this node has {known}\n")
        if exporter.registry is not None:
            return web.Response(
                body=await render(exporter.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
            )
        return await _proxy(request.app[SESSION], exporter, request, limit)

    app.router.add_route("*", "/metrics/{name}", metrics)
    return app


async def _proxy(
    session: aiohttp.ClientSession,
    exporter: Exporter,
    request: web.Request,
    limit: aiohttp.ClientTimeout,
) -> web.Response:
    """``exporter.url``'s answer, as it gave it; 502 or 504 naming the exporter."""
    assert exporter.url is not None
    headers = {"Accept": request.headers["Accept"]} if "Accept" in request.headers else {}
    try:
        async with session.get(exporter.url, headers=headers, timeout=limit) as upstream:
            body = await upstream.read()
            content_type = upstream.headers.get("Content-Type", "text/plain")
            return web.Response(
                status=upstream.status, body=body, headers={"Content-Type": content_type}
            )
    except TimeoutError:
        return web.Response(
            status=504,
            text=f"exporter {exporter.name!r} did not answer within {limit.total:g} s\n",
        )
    except aiohttp.ClientError as exc:
        return web.Response(status=502, text=f"exporter {exporter.name!r} did not answer: {exc}\n")
