"""Metrics: scraping ``/metrics/core`` of large trees, and the proxy's cost for node_exporter.

Run: ``./dev sync && .venv/bin/python benchmarks/metrics.py``. Each figure is printed next
to a baseline measured in the same run, and the ratio of the two:

(m1) ``GET /metrics/core`` over HTTPS with a client certificate (the metrics plugin's server,
     one kept-alive connection) of a node whose supervision tree holds 1,000, then 10,000
     runnables (root → groups of 100 → leaves), with its size in bytes; baseline:
     ``prometheus_client.generate_latest`` of a static registry holding the same series
     (what a process with ordinary, always-updated metrics objects pays per scrape).
(m2) what holds the node's event loop per scrape: collecting the core registry's families
     (the server then renders them in a worker thread); same baseline.
(m3) ``GET /metrics/node`` through the HTTPS proxy; baseline: ``GET`` of node_exporter
     directly over plain HTTP (one kept-alive connection each; the two interleaved, each
     after a warm-up of three). Skipped without
     ``prometheus-node-exporter`` on PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import anyio
from _report import print_comparison, summarise
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    generate_latest,
)
from supervisor import branch

from roleserve_core.identity import Credentials, certificate_to_pem
from roleserve_core.logtree import LogTree
from roleserve_core.node import NodeIntrospection
from roleserve_core.registry import ValueRegistry
from roleserve_core.supervisor import RunContext, State, Supervisor
from roleserve_core.testing import ThrowawayCA
from roleserve_metrics.collectors import STATES, CoreCollector, core_registry
from roleserve_metrics.exporters import Exporter, ExporterTable
from roleserve_metrics.https import HttpsServer
from roleserve_metrics.nodeexporter import node_exporter_arguments
from roleserve_metrics.server import Admission, MetricsRoutes, TlsIdentity


def static_registry(supervisor: Supervisor) -> CollectorRegistry:
    """The supervisor series of the core registry, as ordinary prometheus_client metrics."""
    registry = CollectorRegistry(auto_describe=False)
    state = Gauge("roleserve_runnable_state", "", ("dn", "state"), registry=registry)
    restarts = Counter("roleserve_runnable_restarts", "", ("dn",), registry=registry)
    failures = Counter("roleserve_runnable_failures", "", ("dn",), registry=registry)
    looping = Gauge("roleserve_runnable_crash_looping", "", ("dn",), registry=registry)
    for status in supervisor.status():
        for name in STATES:
            state.labels(status.dn, name).set(1 if name == status.state.value else 0)
        restarts.labels(status.dn)
        failures.labels(status.dn)
        looping.labels(status.dn).set(0)
    return registry


async def timed(call: Callable[[], Awaitable[object]], rounds: int) -> list[float]:
    samples = []
    for round_number in range(rounds + 3):
        start = time.perf_counter()
        await call()
        if round_number >= 3:  # warm-up
            samples.append(time.perf_counter() - start)
    return samples


def timed_sync(call: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for round_number in range(rounds + 3):
        start = time.perf_counter()
        call()
        if round_number >= 3:
            samples.append(time.perf_counter() - start)
    return samples


def client_context(ca: ThrowawayCA, credentials: Credentials) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=certificate_to_pem(ca.certificate).decode())
    context.check_hostname = False
    with tempfile.TemporaryDirectory() as directory:
        certificate, key = Path(directory, "c.pem"), Path(directory, "k.pem")
        certificate.write_bytes(credentials.certificate_pem)
        key.write_bytes(credentials.key_pem)
        context.load_cert_chain(certificate, key)
    return context


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serve(routes: MetricsRoutes, tls: TlsIdentity) -> AsyncIterator[int]:
    """The metrics server (as the worker serves it) on 127.0.0.1; yields its port."""
    port = free_port()
    async with HttpsServer(("127.0.0.1", port), tls.context, routes).serving():
        yield port


async def scrape_core(groups: int, rounds: int) -> None:
    group = branch(100)

    async def root(ctx: RunContext) -> None:
        ctx.run_group({f"group{i}": group for i in range(groups)})
        ctx.signal_healthy()
        await anyio.sleep_forever()

    ca = ThrowawayCA()
    owner = ca.user()
    async with Supervisor(root) as supervisor:
        last = f"root.group{groups - 1}.leaf99"
        await supervisor.wait_state(last, State.HEALTHY)
        count = len(supervisor.status())
        introspection = NodeIntrospection(ValueRegistry(), LogTree())
        introspection.supervisor.set(supervisor)
        table = ExporterTable({"core": Exporter("core", collector=CoreCollector(introspection))})
        node = ca.node()
        tls = TlsIdentity(node)
        static = static_registry(supervisor)
        async with serve(MetricsRoutes(table, Admission(ca.certificate)), tls) as port:
            connector = aiohttp.TCPConnector(ssl=client_context(ca, owner), limit=1)
            async with aiohttp.ClientSession(connector=connector) as session:
                url = f"https://127.0.0.1:{port}/metrics/core"
                size = [0]

                async def get() -> None:
                    async with session.get(url) as response:
                        size[0] = len(await response.read())

                scraped = await timed(get, rounds)
                static_size = len(generate_latest(static))
                baseline = timed_sync(lambda: generate_latest(static), rounds)
                print_comparison(
                    f"(m1) GET /metrics/core, {count} runnables ({size[0]:,} bytes; the "
                    f"static registry's supervisor series: {static_size:,} bytes)",
                    summarise(scraped),
                    summarise(baseline),
                    "generate_latest of a static registry, same supervisor series",
                )
                registry = core_registry(introspection)
                print_comparison(
                    f"(m2) collecting the core registry on the event loop, {count} runnables",
                    summarise(timed_sync(lambda: list(registry.collect()), rounds)),
                    summarise(baseline),
                    "generate_latest of a static registry, same supervisor series",
                )


async def proxy_node(rounds: int) -> None:
    binary = shutil.which("prometheus-node-exporter")
    if binary is None:
        print("(m3) skipped: no prometheus-node-exporter on PATH")
        return
    port = free_port()
    exporter = await anyio.open_process(
        [binary, *node_exporter_arguments(f"127.0.0.1:{port}")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    direct_url = f"http://127.0.0.1:{port}/metrics"
    ca = ThrowawayCA()
    try:
        async with aiohttp.ClientSession() as plain:
            with anyio.fail_after(10):
                while True:
                    try:
                        async with plain.get(direct_url) as response:
                            await response.read()
                            break
                    except aiohttp.ClientError:
                        await anyio.sleep(0.02)
            table = ExporterTable({"node": Exporter("node", url=direct_url)})
            routes = MetricsRoutes(table, Admission(ca.certificate))
            async with serve(routes, TlsIdentity(ca.node())) as https_port:
                connector = aiohttp.TCPConnector(ssl=client_context(ca, ca.user()), limit=1)
                async with aiohttp.ClientSession(connector=connector) as session:
                    proxied_url = f"https://127.0.0.1:{https_port}/metrics/node"

                    async def proxied() -> None:
                        async with session.get(proxied_url) as response:
                            await response.read()

                    async def direct() -> None:
                        async with plain.get(direct_url) as response:
                            await response.read()

                    for _ in range(3):  # warm-up
                        await proxied()
                        await direct()
                    through: list[float] = []
                    straight: list[float] = []
                    for _ in range(rounds):  # interleaved: a change of load hits both alike
                        for call, samples in ((proxied, through), (direct, straight)):
                            start = time.perf_counter()
                            await call()
                            samples.append(time.perf_counter() - start)
                    print_comparison(
                        f"(m3) GET /metrics/node through the HTTPS proxy ({rounds} scrapes)",
                        summarise(through),
                        summarise(straight),
                        "node_exporter scraped directly over plain HTTP",
                    )
    finally:
        exporter.terminate()
        await exporter.wait()


async def main(rounds: int) -> None:
    # The static baseline's counters: no _created series, which the core registry has not.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    for groups in (10, 100):
        await scrape_core(groups, rounds)
    await proxy_node(rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="scrapes per measurement")
    options = parser.parse_args()
    anyio.run(main, options.rounds, backend="asyncio")
