"""``host:port`` strings: how every endpoint is written and read.

Every endpoint a node saves or prints is written by ``endpoint`` and read back by
``split_endpoint``; what an operator types goes through ``split_endpoint`` too, so it must
refuse every string that is not an endpoint, naming it, rather than dial something else.
"""

from __future__ import annotations

import ipaddress

import pytest

from roleserve_clusternet import CLUSTERNET_PORT
from roleserve_controlplane import ETCD_CLIENT_PORT, ETCD_METRICS_PORT, ETCD_PEER_PORT
from roleserve_core.ports import CURATOR_PORT, NODE_MANAGEMENT_PORT, endpoint, split_endpoint
from roleserve_kubernetes import CONTAINERD_METRICS_PORT
from roleserve_metrics import METRICS_PORT, NODE_EXPORTER_PORT


def test_the_standard_ports_are_distinct_and_consecutive() -> None:
    """The core's and its plugins' (each declares its own): one node's never collide."""
    exporters = [NODE_EXPORTER_PORT, ETCD_METRICS_PORT, CONTAINERD_METRICS_PORT]
    assert exporters == [7841, 7842, 7846]
    ports = [
        CURATOR_PORT,
        ETCD_CLIENT_PORT,
        ETCD_PEER_PORT,
        CLUSTERNET_PORT,
        NODE_MANAGEMENT_PORT,
        METRICS_PORT,
    ]
    assert ports == list(range(7835, 7841))


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("10.0.0.1", 7835, "10.0.0.1:7835"),
        (ipaddress.IPv4Address("127.0.0.11"), 7839, "127.0.0.11:7839"),
        ("node1.example.com", 1, "node1.example.com:1"),
        ("2001:db8::1", 7835, "[2001:db8::1]:7835"),
        (ipaddress.IPv6Address("::1"), 7836, "[::1]:7836"),
        ("[2001:db8::1]", 7835, "[2001:db8::1]:7835"),  # already in brackets: kept once
    ],
)
def test_endpoint(host: str | ipaddress.IPv4Address, port: int, expected: str) -> None:
    assert endpoint(host, port) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.1", ("10.0.0.1", 7835)),
        ("10.0.0.1:7000", ("10.0.0.1", 7000)),
        ("node1.example.com", ("node1.example.com", 7835)),
        ("node1.example.com:65535", ("node1.example.com", 65535)),
        ("  10.0.0.1:1\n", ("10.0.0.1", 1)),
        ("[2001:db8::1]", ("2001:db8::1", 7835)),
        ("[2001:db8::1]:7001", ("2001:db8::1", 7001)),
        ("2001:db8::1", ("2001:db8::1", 7835)),  # a bare IPv6 address has no port
        ("::1", ("::1", 7835)),
    ],
)
def test_split_endpoint(text: str, expected: tuple[str, int]) -> None:
    assert split_endpoint(text, 7835) == expected


@pytest.mark.parametrize("text", ["10.0.0.1", "2001:db8::1", "node1.example.com"])
def test_split_endpoint_reads_what_endpoint_writes(text: str) -> None:
    assert split_endpoint(endpoint(text, 7839), 7835) == (text, 7839)


@pytest.mark.parametrize(
    "text",
    [
        "",
        ":7835",  # no host
        "10.0.0.1:",  # no port after the colon
        "10.0.0.1:0",
        "10.0.0.1:65536",
        "10.0.0.1:-1",
        "10.0.0.1:+80",
        "10.0.0.1:http",
        "10.0.0.1:²",  # a digit to str.isdigit, not to int
        "[2001:db8::1",  # unclosed
        "[2001:db8::1]7835",  # no colon after the bracket
        "[2001:db8::1]:",
        "[]:7835",
    ],
)
def test_split_endpoint_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not HOST\[:PORT\]") as caught:
        split_endpoint(text, 7835)
    assert repr(text.strip()) in str(caught.value)


@pytest.mark.parametrize("text", ["10.0.0.1:7835:1", "node1:7835:7836", "2001:db8::1:port"])
def test_split_endpoint_refuses_colons_that_are_not_ipv6(text: str) -> None:
    """Taken as an IPv6 address, these would be dialled as something never meant."""
    with pytest.raises(ValueError, match=r"\[V6\]:PORT"):
        split_endpoint(text, 7835)
