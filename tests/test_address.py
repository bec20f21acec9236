"""Finding the node's own address from the default route, without sending anything."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from roleserve_core import address
from roleserve_core.address import default_route_interface, detect_address, interface_address
from roleserve_core.errors import ConfigError

HEADER = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
    "                                                       \n"
)


def table(*routes: str) -> str:
    """A ``/proc/net/route`` text: the header, then one route per line (as the kernel pads)."""
    return HEADER + "".join(f"{route}\t0\t0\t0" + " " * 63 + "\n" for route in routes)


DEFAULT_ETH0 = "eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000"
LAN_ETH0 = "eth0\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF"
DOCKER = "docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF"
DEFAULT_WLAN = "wlan0\t00000000\t0102A8C0\t0003\t0\t0\t600\t00000000"
# A host route to 0.0.0.0 (mask /32) is not a default route.
HOST_ZERO = "tun0\t00000000\t00000000\t0005\t0\t0\t0\tFFFFFFFF"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (table(DEFAULT_ETH0, LAN_ETH0), "eth0"),
        (table(DOCKER, LAN_ETH0, DEFAULT_ETH0), "eth0"),  # wherever it is listed
        (table(HOST_ZERO, DEFAULT_WLAN), "wlan0"),
        (table(DEFAULT_ETH0, DEFAULT_WLAN), "eth0"),  # the first, as the kernel orders them
        (table(LAN_ETH0, DOCKER), None),  # no default route
        (table(), None),
        ("", None),
        (table(DEFAULT_ETH0).replace("\t", " "), "eth0"),  # any whitespace separates
    ],
)
def test_default_route_interface(text: str, expected: str | None) -> None:
    assert default_route_interface(text) == expected


def test_the_header_is_never_a_route() -> None:
    """A table without its header would lose its first route; the header is skipped as such."""
    assert default_route_interface(DEFAULT_ETH0 + "\n") is None


def test_a_truncated_line_is_ignored() -> None:
    assert default_route_interface(table("eth0\t00000000\t0101A8C0")) is None


def test_the_loopback_interface_address() -> None:
    assert interface_address("lo") == ipaddress.IPv4Address("127.0.0.1")


@pytest.mark.parametrize("name", ["nosuchif0", "", "a-name-longer-than-fifteen"])
def test_an_interface_without_address(name: str) -> None:
    assert interface_address(name) is None


def test_detect_address_reads_the_route_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = tmp_path / "route"
    routes.write_text(table("lo\t00000000\t00000000\t0001\t0\t0\t0\t00000000"))
    monkeypatch.setattr(address, "ROUTE_TABLE", routes)
    assert detect_address() == ipaddress.IPv4Address("127.0.0.1")


@pytest.mark.parametrize(
    "content",
    [
        table(LAN_ETH0),  # no default route
        table("nosuchif0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000"),  # no address
        None,  # no route table at all (not Linux, or no /proc)
    ],
)
def test_detect_address_says_what_to_do_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None
) -> None:
    routes = tmp_path / "route"
    if content is not None:
        routes.write_text(content)
    monkeypatch.setattr(address, "ROUTE_TABLE", routes)
    with pytest.raises(ConfigError) as caught:
        detect_address()
    assert str(caught.value) == (
        "cannot find this node's address (no IPv4 default route); pass --address or "
        "set [node] address in roleserve.toml"
    )
