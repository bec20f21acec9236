"""The HTTPS server: ``/metrics/<name>`` for holders of a metrics-scoped user certificate.

::

    TLS (TlsIdentity.context): the node certificate; a client certificate is required and
        verified against the cluster CA (none, or one of another CA: the handshake fails)
      └─ admission (before every path, discovery's too): the certificate
         must be a user's whose scope holds SCRAPE_METRICS (``metrics`` or ``owner``),
         not revoked; a node's certificate is refused ─▶ 403 with one line why
           ├─ /metrics/<name>: GET (and HEAD) only, else 405; unknown name 404
           │    ├─ a collector: generate_latest(its registry)
           │    └─ a URL: proxied; no answer ─▶ 502 naming the exporter,
           │       no answer within the timeout ─▶ 504 naming it
           └─ /discovery (with a view): GET only, else 405; any other path 404

``MetricsRoutes`` answers each request (``https.HttpsServer`` serves it): admission, the
lookup and the collection on the event loop, where the core's state lives and changes
(``anyio.from_thread``); the rendering and the proxying in the connection's thread (the
standard library's ``http.client``: the exporters are local and plain HTTP). With a
``DiscoveryView``, it answers ``/discovery`` too (GET only); admission applies to every
path.

The node certificate renews itself (``workers/renewal.py``): ``TlsIdentity.load`` loads
new credentials into the same ``ssl.SSLContext``, and handshakes from then on present them;
connections already open keep the certificate they started with.
"""

from __future__ import annotations

import functools
import http.client
import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import anyio.from_thread
import anyio.lowlevel
from cryptography import x509
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import Metric

from roleserve_core import authorization_pb2
from roleserve_core.identity import NodeCredentials, certificate_to_pem
from roleserve_core.rpc import NodePeer, PeerClassifier, UserPeer
from roleserve_metrics.discovery import DISCOVERY_PATH, DiscoveryView
from roleserve_metrics.exporters import Exporter, ExporterTable
from roleserve_metrics.https import Answer, Request

__all__ = [
    "METRICS_PATH",
    "Admission",
    "MetricsRoutes",
    "TlsIdentity",
    "proxy",
]

METRICS_PATH = "/metrics/"
"""The exporters' paths: ``/metrics/<name>``."""

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


class _Collected:
    """Metric families already collected, as a registry ``generate_latest`` can render."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


Finish = Callable[[], Answer]
"""The rest of an answer, done in the connection's thread: rendering, proxying."""


class MetricsRoutes:
    """What the server answers (see the module docstring): ``__call__`` in a connection's
    thread, which calls ``route`` on the event loop it was made on."""

    def __init__(
        self,
        exporters: ExporterTable,
        admission: Admission,
        *,
        timeout: float = 10.0,
        discovery: DiscoveryView | None = None,
    ) -> None:
        """Make it on the event loop (it keeps the loop's token: ``from_thread`` with a
        token, anyio 4.11, is how a thread anyio did not start gets back to the loop).

        :param timeout: seconds a proxied exporter may take (then 504).
        :param discovery: the view ``/discovery`` answers from; None: no ``/discovery``.
        """
        self.exporters = exporters
        self.admission = admission
        self.timeout = timeout
        self.discovery = discovery
        self.token = anyio.lowlevel.current_token()

    def __call__(self, request: Request) -> Answer:
        routed = anyio.from_thread.run_sync(self.route, request, token=self.token)
        return routed if isinstance(routed, Answer) else routed()

    def route(self, request: Request) -> Answer | Finish:
        """On the event loop: the answer, or what finishes it in the thread."""
        refusal = self.admission.refusal(request.certificate)
        if refusal is not None:
            return Answer.text(403, refusal)
        if request.path == DISCOVERY_PATH and self.discovery is not None:
            if request.method != "GET":
                return Answer.text(405, "GET only", Allow="GET")
            status, body, headers = self.discovery.answer()
            content_type = "application/json" if status == 200 else "text/plain; charset=utf-8"
            return Answer(status, body, content_type, headers)
        if not request.path.startswith(METRICS_PATH) or "/" in request.path[len(METRICS_PATH) :]:
            return Answer.text(404, "not found")
        return self._metrics(request, request.path[len(METRICS_PATH) :])

    def _metrics(self, request: Request, name: str) -> Answer | Finish:
        if request.method not in ("GET", "HEAD"):
            return Answer.text(405, "GET only", Allow="GET")
        exporter = self.exporters.get(name)
        if exporter is None:
            known = ", ".join(self.exporters.names())
            return Answer.text(404, f"no exporter {name!r}; this node has {known}")
        if exporter.registry is not None:
            families = list(exporter.registry.collect())
            return lambda: Answer(200, generate_latest(_Collected(families)), CONTENT_TYPE_LATEST)
        accept = request.headers.get("accept")
        return lambda: proxy(exporter, accept, self.timeout)


def proxy(exporter: Exporter, accept: str | None, timeout: float) -> Answer:
    """``exporter.url``'s answer, as it gave it; 502 or 504 naming the exporter.

    Blocking (a connection's thread). ``timeout`` bounds the connection and each wait for
    the exporter's bytes.
    """
    assert exporter.url is not None
    url = urlsplit(exporter.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout)
    try:
        connection.request(
            "GET", url.path + (f"?{url.query}" if url.query else ""), headers=_accept(accept)
        )
        upstream = connection.getresponse()
        body = upstream.read()
        content_type = upstream.getheader("Content-Type", "text/plain")
        return Answer(upstream.status, body, content_type)
    except TimeoutError:
        return Answer.text(504, f"exporter {exporter.name!r} did not answer within {timeout:g} s")
    except (OSError, http.client.HTTPException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return Answer.text(502, f"exporter {exporter.name!r} did not answer: {reason}")
    finally:
        connection.close()


def _accept(accept: str | None) -> dict[str, str]:
    return {"Accept": accept} if accept is not None else {}
