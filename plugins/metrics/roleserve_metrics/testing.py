"""A real Prometheus for tests: started on a configuration, asked over its HTTP API.

Shipped with the plugin (as the controlplane plugin ships its ``testing``), so that the
plugin's own suite and the workspace's end-to-end tests start Prometheus the same way::

    with run_prometheus(config, address, port, tmp_path) as api:
        active = await targets_when(api, lambda targets: len(targets) == 3 and all_up(targets))
        series = await query(api, "roleserve_runnable_state")

Prometheus is Debian's (``apt-get install prometheus``); without it the test skips, or fails
under ``ROLESERVE_REQUIRE_REAL=1``.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
from cryptography import x509

from roleserve_core.identity import Credentials, certificate_to_pem
from roleserve_core.testing import poll_until, require_real

__all__ = ["all_up", "client_context", "free_port", "query", "run_prometheus", "targets_when"]

Target = dict[str, Any]
"""One of Prometheus's active targets, as ``/api/v1/targets`` lists it."""

WAIT = 60.0
"""Seconds Prometheus may take to start, discover and scrape every target (it takes ~3)."""


def free_port(address: str) -> int:
    """A TCP port nothing listens on at ``address`` now."""
    with socket.socket() as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


def client_context(ca: x509.Certificate, credentials: Credentials | None) -> ssl.SSLContext:
    """A client's TLS context for the metrics server: trusts the cluster CA ``ca`` (not a
    host name: node certificates name none) and presents ``credentials`` (none if None)."""
    context = ssl.create_default_context(cadata=certificate_to_pem(ca).decode())
    context.check_hostname = False
    if credentials is not None:
        with tempfile.TemporaryDirectory(prefix="roleserve-metrics-client-") as directory:
            certificate, key = Path(directory, "cert.pem"), Path(directory, "key.pem")
            certificate.write_bytes(credentials.certificate_pem)
            key.write_bytes(credentials.key_pem)
            context.load_cert_chain(certificate, key)
    return context


@contextlib.contextmanager
def run_prometheus(config: Path, address: str, port: int, directory: Path) -> Iterator[str]:
    """Prometheus on ``config``, its API at ``address:port``, its data and log
    (``prometheus.log``) in ``directory``; yields the API's URL. Stopped at the end."""
    binary = shutil.which("prometheus")
    require_real("prometheus", binary, "apt-get install prometheus")
    assert binary is not None
    log = directory / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address={address}:{port}",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            yield f"http://{address}:{port}"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def all_up(targets: list[Target]) -> bool:
    """Whether every target's last scrape succeeded."""
    return all(target["health"] == "up" for target in targets)


async def _api(api: str, path: str, **params: str) -> Any:
    async with (
        aiohttp.ClientSession() as client,
        client.get(f"{api}{path}", params=params) as response,
    ):
        answer = await response.json()
    if answer.get("status") != "success":
        raise AssertionError(f"Prometheus answered {path} with {answer!r}")
    return answer["data"]


async def targets_when(
    api: str, predicate: Callable[[list[Target]], bool], *, timeout: float = WAIT
) -> list[Target]:
    """Prometheus's active targets, once ``predicate`` accepts them (asked again until then;
    the failure names the last list)."""

    async def active() -> list[Target]:
        targets: list[Target] = (await _api(api, "/api/v1/targets"))["activeTargets"]
        return targets

    return await poll_until("Prometheus's targets", active, predicate, timeout=timeout)


async def query(api: str, promql: str) -> list[dict[str, Any]]:
    """The series of an instant PromQL query (``result`` of ``/api/v1/query``)."""
    result: list[dict[str, Any]] = (await _api(api, "/api/v1/query", query=promql))["result"]
    return result
