"""The worker end to end, in process: HTTPS with client certificates, the real node_exporter,
exporters of other plugins through the hook."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.core import CounterMetricFamily, Metric

from roleserve_core import (
    NETWORK,
    NODE_CREDENTIALS,
    REVOKED_CREDENTIALS,
    ROLES,
    AddressInUseError,
    NetworkStatus,
    NodeRoles,
    RevokedCredentials,
    State,
    hookimpl,
)
from roleserve_core.identity import (
    Credentials,
    NodeCredentials,
    Scope,
    UserCredentials,
    generate_key,
    issue_user_certificate,
)
from roleserve_core.testing import (
    FakeClock,
    NodeHarness,
    StartNode,
    ThrowawayCA,
    poll_until,
    presented_certificate,
    random_loopback,
    require_real,
    start_plugin_node,
)
from roleserve_metrics import METRICS_PORT, Exporter, hooks
from roleserve_metrics.https import Answer
from roleserve_metrics.server import TlsIdentity
from roleserve_metrics.settings import NODE_EXPORTER_EXECUTABLE
from roleserve_metrics.testing import client_context
from roleserve_metrics.worker_metrics import _serving

pytestmark = pytest.mark.anyio

DN = "root.role.metrics"
EXPORTER_DN = f"{DN}.node_exporter"


class Things:
    """A collector a plugin contributes."""

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily("things", "Things counted.", labels=("kind",))
        family.add_metric(("blue",), 3)
        return [family]


class ThingsPlugin:
    """Contributes ``things`` (a collector) and ``silent`` (a URL that never answers)."""

    def __init__(self, silent: str) -> None:
        self.silent = silent

    @hookimpl(optionalhook=True)
    def roleserve_metrics_exporters(self, node: Any) -> list[Any]:
        return [Exporter("things", collector=Things()), ("silent", self.silent)]


class RivalPlugin:
    """Contributes a second ``things`` and a second ``core``: both refused."""

    @hookimpl(optionalhook=True)
    def roleserve_metrics_exporters(self, node: Any) -> list[Any]:
        return [("things", Things()), ("core", Things())]


class RolePlugin:
    """Contributes ``role`` only while the node holds the custom role ``scraped``."""

    @hookimpl(optionalhook=True)
    def roleserve_metrics_exporters(self, node: Any) -> list[Any]:
        roles = node.values.read(ROLES)
        if roles.statistics().is_set and "scraped" in roles.get_nowait().custom:
            return [("role", Things())]
        return []


@dataclass
class Node:
    """The node under test and how to reach its metrics."""

    harness: NodeHarness
    ca: ThrowawayCA
    host: str
    port: int
    tmp: Path

    def url(self, name: str) -> str:
        return f"https://{self.host}:{self.port}/metrics/{name}"

    def client(self, credentials: Credentials | None) -> aiohttp.ClientSession:
        """A session presenting ``credentials`` (none if None), trusting the cluster CA."""
        context = client_context(self.ca.certificate, credentials)
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, force_close=True))

    async def get(
        self, name: str, credentials: Credentials | None, method: str = "GET"
    ) -> tuple[int, str]:
        async with (
            self.client(credentials) as session,
            session.request(method, self.url(name)) as response,
        ):
            return response.status, await response.text()


def scoped_user(ca: ThrowawayCA, scope: Scope, identity: str = "scraper") -> UserCredentials:
    key = generate_key()
    certificate = issue_user_certificate(
        ca.key, ca.certificate, key.public_key(), identity, scope=scope
    )
    return UserCredentials(key, certificate, ca.certificate)


@pytest.fixture
async def silent() -> AsyncIterator[str]:
    """A local URL that accepts connections and never answers."""
    with socket.create_server((str(random_loopback()), 0)) as server:
        host, port = server.getsockname()[:2]
        yield f"http://{host}:{port}/metrics"


async def start_node(
    node: StartNode,
    tmp_path: Path,
    plugins: Sequence[tuple[object, str]] = (),
    **settings: Any,
) -> Node:
    registered = {"metrics": hooks, **{name: plugin for plugin, name in plugins}}
    config = {"metrics": settings}
    harness = await start_plugin_node(node, tmp_path / "node", registered, config=config)
    ca = ThrowawayCA()
    host = str(random_loopback())
    harness.set(NODE_CREDENTIALS, ca.node())
    harness.set(NETWORK, NetworkStatus(ipaddress.ip_address(host)))
    await harness.wait_state(DN)
    return Node(harness, ca, host, settings.get("port", METRICS_PORT), tmp_path)


def needs_node_exporter() -> None:
    require_real(
        "node_exporter",
        shutil.which(NODE_EXPORTER_EXECUTABLE),
        "apt-get install prometheus-node-exporter",
    )


async def test_who_may_scrape(node: StartNode, tmp_path: Path) -> None:
    served = await start_node(node, tmp_path, node_exporter="/nonexistent/node_exporter")
    ca = served.ca

    status, text = await served.get("core", ca.user())  # an owner certificate
    assert status == 200
    assert "roleserve_runnable_state{" in text
    assert 'roleserve_plugin_info{name="metrics"' in text
    status, text = await served.get("core", scoped_user(ca, Scope.METRICS))
    assert status == 200

    for scope in (Scope.VIEWER, Scope.OPERATOR):
        status, text = await served.get("core", scoped_user(ca, scope))
        assert status == 403
        assert f"has scope {scope.value!r}, which may not scrape metrics" in text

    status, text = await served.get("core", ca.node())
    assert (status, text) == (
        403,
        "a node certificate may not scrape metrics; use a user certificate\n",
    )

    with pytest.raises(aiohttp.ClientError):
        await served.get("core", None)  # no client certificate: the handshake fails
    with pytest.raises(aiohttp.ClientError):
        await served.get("core", ThrowawayCA().user())  # another cluster's CA

    owner = ca.user()
    assert (await served.get("core", owner, method="POST"))[0] == 405
    assert (await served.get("core", owner, method="DELETE"))[0] == 405
    status, text = await served.get("nope", owner)
    assert status == 404
    assert "no exporter 'nope'; this node has core" in text

    # Revoked: refused from the moment the node hears of it.
    revoked = scoped_user(ca, Scope.METRICS)
    assert (await served.get("core", revoked))[0] == 200
    served.harness.set(
        REVOKED_CREDENTIALS, RevokedCredentials(frozenset({revoked.certificate.serial_number}))
    )
    status, text = await served.get("core", revoked)
    assert (status, text) == (403, "the client certificate is revoked\n")


async def test_node_exporter_missing_is_one_line_not_a_crash_loop(
    node: StartNode, tmp_path: Path
) -> None:
    served = await start_node(node, tmp_path, node_exporter="/nonexistent/node_exporter")
    status = served.harness.status(DN)
    assert (status.state, status.failures) == (State.HEALTHY, 0)
    lines = [
        entry.message
        for entry in served.harness.runtime.logtree.entries(DN)
        if "no node exporter" in entry.message
    ]
    assert len(lines) == 1
    assert "/nonexistent/node_exporter" in lines[0]
    assert (await served.get("node", served.ca.user()))[0] == 404
    # And ctl tree says so: the child is there, not running (never HEALTHY), saying why.
    child = await served.harness.wait_status(EXPORTER_DN, lambda s: s.note != "")
    assert (child.state, child.failures) == (State.NEW, 0)
    assert child.note == f"not running: {lines[0].removeprefix('no node exporter: ')}"


async def test_node_exporter_proxied_killed_and_back(
    node: StartNode, tmp_path: Path, fake_clock: FakeClock
) -> None:
    needs_node_exporter()
    served = await start_node(node, tmp_path)
    owner = served.ca.user()
    await served.harness.wait_state(EXPORTER_DN)
    status, text = await served.get("node", owner)
    assert status == 200
    assert "node_exporter_build_info" in text

    note = served.harness.status(EXPORTER_DN).note
    match = re.search(r"pid (\d+)", note)
    assert match is not None, note
    os.kill(int(match.group(1)), signal.SIGKILL)
    await served.harness.wait_status(EXPORTER_DN, lambda status: status.failures == 1)
    status, text = await served.get("node", owner)
    assert status == 502
    assert "exporter 'node' did not answer" in text

    await fake_clock.advance_to_next()  # the backoff
    await served.harness.wait_state(EXPORTER_DN)
    status, text = await served.get("node", owner)
    assert status == 200
    assert "node_exporter_build_info" in text


async def test_plugin_exporters_duplicates_and_timeouts(
    node: StartNode, tmp_path: Path, silent: str
) -> None:
    served = await start_node(
        node,
        tmp_path,
        [(ThingsPlugin(silent), "things"), (RivalPlugin(), "rival"), (RolePlugin(), "roles")],
        node_exporter="/nonexistent/node_exporter",
        upstream_timeout=0.3,
    )
    owner = served.ca.user()
    status, text = await served.get("things", owner)
    assert status == 200
    assert 'things_total{kind="blue"} 3.0' in text
    status, text = await served.get("core", owner)
    assert status == 200
    assert "roleserve_runnable_state" in text  # still the node's own

    errors = [
        entry.message
        for entry in served.harness.runtime.logtree.entries(DN)
        if "refused" in entry.message
    ]
    assert sorted(errors) == [
        "exporter 'core' of plugin 'rival' refused: plugin 'metrics' already contributes "
        "an exporter of that name",
        "exporter 'things' of plugin 'rival' refused: plugin 'things' already contributes "
        "an exporter of that name",
    ]

    status, text = await served.get("silent", owner)
    assert (status, text) == (504, "exporter 'silent' did not answer within 0.3 s\n")

    assert (await served.get("role", owner))[0] == 404
    served.harness.set_roles(NodeRoles(custom={"scraped": {}}))
    await poll_until(
        "/metrics/role served", lambda: served.get("role", owner), lambda got: got[0] == 200
    )
    said = [entry.message for entry in served.harness.runtime.logtree.entries(DN)]
    assert "exporters now: core, role, silent, things" in said


async def test_a_renewed_certificate_is_presented_without_a_restart(
    node: StartNode, tmp_path: Path
) -> None:
    served = await start_node(node, tmp_path, node_exporter="/nonexistent/node_exporter")
    first = served.harness.runtime.registry.read(NODE_CREDENTIALS, "test").get_nowait()
    owner = served.ca.user()
    assert await presented_certificate(served.host, served.port, owner) == first.certificate
    renewed: NodeCredentials = served.ca.node(first.key)
    served.harness.set(NODE_CREDENTIALS, renewed)
    await poll_until(
        "the renewed certificate presented",
        lambda: presented_certificate(served.host, served.port, owner),
        lambda presented: presented == renewed.certificate,
    )
    assert served.harness.status(DN).restarts == 0
    assert (await served.get("core", owner))[0] == 200


async def test_a_held_port_is_one_line_naming_the_holder() -> None:
    """Another process on the exporter's address: a ``ResourceError`` (retried, logged in
    one line as waiting for the operator), naming the address and the holder, as the
    node's gRPC servers do; not an ``OSError`` with a traceback."""
    host = str(random_loopback())
    with socket.socket() as holder:
        holder.bind((host, 0))
        holder.listen()
        port = holder.getsockname()[1]
        tls = TlsIdentity(ThrowawayCA().node())
        with pytest.raises(AddressInUseError) as held:
            async with _serving(lambda request: Answer(200), host, port, tls):
                pass
    assert str(held.value).startswith(
        f"cannot listen on {host}:{port}: held by pid {os.getpid()} ("
    )
