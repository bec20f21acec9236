"""The real tests' kit: network namespaces joined by a veth pair (the fixture
``netns_pair``, imported by the test modules that use it; ``namespace_pair`` for the
benchmark), ``wg``, a TCP exchange.

Everything is made in namespaces the test creates (addresses from 10.254.0.0/16 only
there) and removed after it; interface names are unique per test, since wireguard-go's
UAPI sockets (``/var/run/wireguard``) are shared by every namespace of the machine.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from roleserve_core.testing import require_real


@dataclass(frozen=True)
class Side:
    """One end: a namespace, its veth address, a unique WireGuard interface name, and a
    prefix of the mesh network."""

    netns: str
    veth_address: str
    interface: str
    prefix: ipaddress.IPv4Network

    @property
    def mesh_address(self) -> str:
        return str(next(self.prefix.hosts()))


@dataclass(frozen=True)
class NetnsPair:
    a: Side
    b: Side
    mesh: ipaddress.IPv4Network
    """The cluster network of the test: both prefixes are in it."""


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=30)


def real_wireguard_available() -> str:
    """Why the real tests cannot run here, or ``""``."""
    if os.geteuid() != 0:
        return "root"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun"
    for tool in ("ip", "wireguard-go", "wg"):
        if shutil.which(tool) is None:
            return tool
    return ""


@pytest.fixture
def netns_pair() -> Iterator[NetnsPair]:
    """Two namespaces joined by a veth pair, with unique names; removed after the test."""
    missing = real_wireguard_available()
    require_real(
        "root, /dev/net/tun, ip, wireguard-go and wg",
        not missing,
        f"missing: {missing}; apt-get install wireguard-go wireguard-tools iproute2, run as root",
    )
    with namespace_pair("rscn") as pair:
        yield pair


@contextmanager
def namespace_pair(kind: str) -> Iterator[NetnsPair]:
    """Two namespaces joined by a veth pair, named ``<kind>-<random tag>-a`` and ``-b``
    (interfaces ``<kind><tag>a``, ``b``), each with a /28 of one mesh /24 of 10.254.0.0/16;
    removed at the end, with whatever is left in them. For the ``netns_pair`` fixture and
    the clusternet benchmark."""
    tag = secrets.token_hex(3)
    third = secrets.randbelow(120) * 2
    mesh = ipaddress.IPv4Network(f"10.254.{third + 1}.0/24")
    first, second = list(mesh.subnets(4))[:2]
    a = Side(f"{kind}-{tag}-a", f"10.254.{third}.1", f"{kind}{tag}a", first)
    b = Side(f"{kind}-{tag}-b", f"10.254.{third}.2", f"{kind}{tag}b", second)
    created: list[str] = []
    try:
        for side in (a, b):
            _run("ip", "netns", "add", side.netns)
            created.append(side.netns)
            _run("ip", "-n", side.netns, "link", "set", "lo", "up")
        _run(
            "ip", "-n", a.netns, "link", "add", "veth0", "type", "veth",
            "peer", "name", "veth1", "netns", b.netns,
        )  # fmt: skip
        for side, veth in ((a, "veth0"), (b, "veth1")):
            _run("ip", "-n", side.netns, "addr", "add", f"{side.veth_address}/24", "dev", veth)
            _run("ip", "-n", side.netns, "link", "set", veth, "up")
        yield NetnsPair(a, b, mesh)
    finally:
        for netns in created:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)


def wg(side: Side, *arguments: str) -> str:
    """``wg`` on ``side``'s interface (it finds the UAPI socket by name)."""
    done = subprocess.run(
        ["ip", "netns", "exec", side.netns, "wg", *arguments],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout


ECHO_SERVER = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
connection, _ = server.accept()
data = b""
while not data.endswith(b"\\n"):
    chunk = connection.recv(65536)
    if not chunk:
        break
    data += chunk
connection.sendall(data.upper())
connection.close()
"""

ECHO_CLIENT = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20) as connection:
    connection.sendall(sys.argv[3].encode() + b"\\n")
    data = b""
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
print(data.decode().strip())
"""


def tcp_exchange(server: Side, client: Side, text: str) -> str:
    """Send ``text`` over TCP from ``client``'s namespace to ``server``'s mesh address and
    return what the server sent back (``text`` upper-cased)."""
    with subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            server.netns,
            sys.executable,
            "-c",
            ECHO_SERVER,
            server.mesh_address,
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as listening:
        try:
            assert listening.stdout is not None
            port = listening.stdout.readline().strip()
            done = subprocess.run(
                [
                    "ip", "netns", "exec", client.netns, sys.executable, "-c", ECHO_CLIENT,
                    server.mesh_address, port, text,
                ],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done.stdout.strip()
        finally:
            listening.kill()
