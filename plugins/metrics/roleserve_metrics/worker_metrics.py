"""Worker ``metrics``: Prometheus exporters over mutual TLS on the node's address, port 7840.

Reads ``node_credentials``, ``network``, ``roles`` and ``revoked_credentials``; writes no
value. Runs always (``when=None``).

::

    node_credentials ─┐
    network ──────────┴─▶ plan_listen() ─▶ Listen(address, credentials)      (waits, with a note)
                                       │
            ┌──────────────────────────┴─ local exporter host: 127.0.0.1, or the address
            │                              if it is a loopback one
            ├─ child node_exporter (if its binary is found; else one log line, no `node`,
            │                       and the child NEW with the reason: not running)
            ├─ exporters: core, node, and every plugin's (roleserve_metrics_exporters),
            │  gathered again on each change of roles
            └─ HTTPS on <address>:7840 (server.MetricsRoutes, served by https.HttpsServer):
               admission, /metrics/<name>, /discovery
    node_credentials renewed (same CA, same address) ─▶ TlsIdentity.load: no restart
    address or CA changed ─▶ ctx.restart()

Monogon's worker (``roleserve/worker_metrics.go``) waits for the curator connection first;
this one waits only for what its server needs, the node certificate and address, as
``nodemgmt`` does, so a node that cannot reach the control plane can still be scraped, which
is when its metrics matter most. Monogon's ``watch-consensus`` child, which runs discovery
on consensus members, is the worker ``metrics_discovery`` here (``discovery.py``); this
worker answers ``/discovery`` from the view that one keeps, on every node (503 where it does
not run).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import anyio

from roleserve_core import (
    NETWORK,
    NODE_CREDENTIALS,
    REVOKED_CREDENTIALS,
    ROLES,
    Combined,
    Listen,
    NodeContext,
    NodeIntrospection,
    RevokedCredentials,
    RoleserveError,
    RunContext,
    ValueWatch,
    address_in_use,
    endpoint,
    local_exporter_host,
    plan_listen,
)
from roleserve_metrics.collectors import CoreCollector
from roleserve_metrics.discovery import DiscoveryView
from roleserve_metrics.exporters import Exporter, ExporterTable, gather_exporters
from roleserve_metrics.https import Answerer, HttpsServer
from roleserve_metrics.nodeexporter import (
    absent_node_exporter_runnable,
    node_exporter_runnable,
    node_exporter_spec,
    resolve_node_exporter,
)
from roleserve_metrics.server import Admission, MetricsRoutes, TlsIdentity
from roleserve_metrics.settings import MetricsSettings

__all__ = ["OWNER", "run"]

OWNER = "metrics"
"""The owner named for the builtin exporters (``core``, ``node``): this plugin."""


async def run(
    ctx: RunContext,
    node: NodeContext,
    settings: MetricsSettings,
    discovery: DiscoveryView | None = None,
) -> None:
    """The worker (see the module docstring), which the hooks name with ``lazy_runnable``.
    With ``discovery``, it answers ``/discovery`` from that view as well (the worker
    ``metrics_discovery`` keeps it)."""
    await MetricsServer(ctx, node, settings, discovery).run()


class MetricsServer:
    """One run of the worker."""

    def __init__(
        self,
        ctx: RunContext,
        node: NodeContext,
        settings: MetricsSettings,
        discovery: DiscoveryView | None = None,
    ) -> None:
        self.ctx = ctx
        self.node = node
        self.settings = settings
        self.discovery = discovery
        self.introspection = _introspection(node)
        self.table = ExporterTable()
        self.builtin: list[Exporter] = []
        """``core`` and ``node``: this plugin's own, before any other plugin's."""
        self.reported: set[str] = set()
        """Refusals already logged: one line each, not one per change of roles."""

    async def run(self) -> None:
        values = self.node.values
        sources = (values.read(NODE_CREDENTIALS), values.read(NETWORK), values.read(ROLES))
        async with Combined(*sources) as inputs:
            while True:
                credentials, network, _roles = await inputs.get()
                listen = plan_listen(credentials, network)
                if isinstance(listen, Listen):
                    break
                self.ctx.set_note(listen)
            host = local_exporter_host(listen.address)
            core = Exporter("core", collector=CoreCollector(self.introspection), owner=OWNER)
            self.builtin = [core, *self._start_node_exporter(host)]
            self._gather()
            tls = TlsIdentity(listen.credentials)
            admission = Admission(
                listen.credentials.ca_certificate, _revoked(values.read(REVOKED_CREDENTIALS))
            )
            routes = MetricsRoutes(
                self.table,
                admission,
                timeout=self.settings.upstream_timeout,
                discovery=self.discovery,
            )
            address = endpoint(listen.address, self.settings.port)
            async with _serving(routes, str(listen.address), self.settings.port, tls):
                self.ctx.set_note(f"serving at https://{address}")
                self.ctx.log.info(
                    "serving metrics at https://%s: %s", address, ", ".join(self.table.names())
                )
                self.ctx.signal_healthy()
                while True:
                    credentials, network, _roles = await inputs.get()
                    latest = plan_listen(credentials, network)
                    if not isinstance(latest, Listen) or not _same_server(listen, latest):
                        self.ctx.log.info("its address or CA changed, restarting: %s", latest)
                        self.ctx.restart()
                        await anyio.sleep_forever()  # until the restart's cancellation
                        continue
                    if latest.credentials.certificate != tls.certificate:
                        tls.load(latest.credentials)
                        self.ctx.log.info("presenting the renewed node certificate")
                    self._gather()

    def _start_node_exporter(self, host: str) -> list[Exporter]:
        """The child ``node_exporter`` and its exporter ``node``; none if not found."""
        spec = node_exporter_spec(self.settings, host, self.node.data_dir)
        found = resolve_node_exporter(spec)
        if isinstance(found, Exception):
            self.ctx.log.warning("no node exporter: %s", found)
            self.ctx.run("node_exporter", absent_node_exporter_runnable(found))
            return []
        spec = node_exporter_spec(self.settings, host, self.node.data_dir, found)
        self.ctx.run("node_exporter", node_exporter_runnable(spec))
        url = f"http://{endpoint(host, self.settings.node_exporter_port)}/metrics"
        return [Exporter("node", url=url, owner=OWNER)]

    def _gather(self) -> None:
        """The exporters of now (the builtin ones and the plugins'), for the server."""
        gathered = gather_exporters(self.builtin, self.introspection)
        for refusal in gathered.refused:
            if refusal not in self.reported:
                self.reported.add(refusal)
                self.ctx.log.error("%s", refusal)
        if sorted(gathered.exporters) != self.table.names() and self.table.names():
            self.ctx.log.info("exporters now: %s", ", ".join(sorted(gathered.exporters)))
        self.table.replace(gathered.exporters)


def _same_server(serving: Listen, latest: Listen) -> bool:
    """Whether a server for ``serving`` can go on for ``latest``: the same address and
    CA (a renewed certificate is loaded in place)."""
    return (
        latest.address == serving.address
        and latest.credentials.ca_certificate == serving.credentials.ca_certificate
    )


def _revoked(view: ValueWatch[RevokedCredentials]) -> Callable[[int], bool]:
    """Whether the leader last said a serial is revoked (none until the ``revocations``
    worker has heard from it), read at each admission."""

    def revoked(serial: int) -> bool:
        return view.statistics().is_set and serial in view.get_nowait().serials

    return revoked


@contextlib.asynccontextmanager
async def _serving(answer: Answerer, host: str, port: int, tls: TlsIdentity) -> AsyncIterator[None]:
    """``answer`` served over ``tls`` on ``host:port``; stopped on exit.

    :raises AddressInUseError: naming the address and its holder, if another process has it.
    :raises OSError: naming the address, if it cannot listen there otherwise.
    """
    try:
        server = HttpsServer((host, port), tls.context, answer)
    except OSError as exc:
        held = address_in_use(host, port)  # one line, retried (a ResourceError)
        if held is not None:
            raise held from None
        raise OSError(f"cannot listen on {endpoint(host, port)}: {exc.strerror or exc}") from exc
    async with server.serving():
        yield


def _introspection(node: NodeContext) -> NodeIntrospection:
    if node.introspection is None:
        raise RoleserveError(
            "the metrics worker needs the node's introspection (NodeContext.introspection), "
            "which only a NodeRuntime provides"
        )
    return node.introspection
