"""``roleserve.toml``: the defaults, every key it accepts, and every refusal.

A refusal must name the file and the key, and say what was expected, because the node
stops on it before it starts anything: the message is all the operator gets.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from roleserve_core.config import LOG_LEVELS, NodeConfig, load_config, parse_address
from roleserve_core.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "roleserve.toml"
    path.write_text(text)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message
    return message


# -- what it accepts ----------------------------------------------------------------------


def test_a_missing_file_means_the_defaults(tmp_path: Path) -> None:
    config = load_config(tmp_path / "roleserve.toml")
    assert config == NodeConfig()
    assert config.address is None
    assert config.log_level == "info"
    assert config.strict_plugins is False
    assert config.plugins == {}
    assert (config.log_file, config.log_max_bytes, config.log_files) == (None, 10 << 20, 5)


def test_an_empty_file_means_the_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")) == NodeConfig()


def test_every_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [node]
        address = "10.0.0.5"
        log_level = "debug"
        log_file = "logs/node.log"
        log_max_bytes = 1048576
        log_files = 2
        strict_plugins = true

        [plugins.controlplane]
        etcd = "/usr/bin/etcd"
        members = 3

        [plugins.hostsfile]
        """,
    )
    assert load_config(path) == NodeConfig(
        address=ipaddress.IPv4Address("10.0.0.5"),
        log_level="debug",
        log_file=tmp_path / "logs" / "node.log",  # relative: in the data directory
        log_max_bytes=1 << 20,
        log_files=2,
        strict_plugins=True,
        plugins={"controlplane": {"etcd": "/usr/bin/etcd", "members": 3}, "hostsfile": {}},
    )


@pytest.mark.parametrize("level", LOG_LEVELS)
def test_every_log_level(tmp_path: Path, level: str) -> None:
    assert load_config(write(tmp_path, f'[node]\nlog_level = "{level}"\n')).log_level == level


def test_an_ipv6_address(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[node]\naddress = "2001:db8::5"\n'))
    assert config.address == ipaddress.IPv6Address("2001:db8::5")


# -- what it refuses ----------------------------------------------------------------------


def test_toml_that_does_not_parse(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, "[node\naddress = 1\n"))
    assert "is not valid TOML" in message


def test_a_file_that_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "roleserve.toml"
    path.write_bytes(b"\xff\xfe[node]\n")
    assert "cannot be read" in refusal(path)


def test_an_unknown_section(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, "[nodes]\naddress = '10.0.0.5'\n[extra]\n"))
    assert "unknown sections extra, nodes" in message
    assert "[node], [plugins.NAME]" in message


def test_an_unknown_node_key(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, "[node]\nadress = '10.0.0.5'\n"))
    assert "unknown [node] settings adress" in message
    assert (
        "known: address, log_level, log_file, log_max_bytes, log_files, strict_plugins" in message
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node = 5\n", "node must be a table ([node])"),
        ("plugins = 'controlplane'\n", "plugins must be a table ([plugins])"),
        ("[plugins]\ncontrolplane = 'yes'\n", "plugins.controlplane must be a table"),
        ("[node]\naddress = 10\n", "[node] address must be a string"),
        ("[node]\naddress = true\n", "[node] address must be a string"),
        ("[node]\nstrict_plugins = 'yes'\n", "[node] strict_plugins must be true or false"),
        ("[node]\nstrict_plugins = 1\n", "[node] strict_plugins must be true or false"),
        ("[node]\nlog_level = 10\n", "[node] log_level must be one of debug, info, warning"),
        ("[node]\nlog_file = ''\n", "[node] log_file must be a path (a non-empty string)"),
        ("[node]\nlog_file = 3\n", "[node] log_file must be a path (a non-empty string)"),
        ("[node]\nlog_max_bytes = 1000\n", "[node] log_max_bytes must be a whole number of at"),
        ("[node]\nlog_max_bytes = '10M'\n", "[node] log_max_bytes must be a whole number of"),
        ("[node]\nlog_files = 0\n", "[node] log_files must be a whole number of at least 1"),
        ("[node]\nlog_files = true\n", "[node] log_files must be a whole number of at least 1"),
    ],
)
def test_a_wrong_type(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in refusal(write(tmp_path, text))


@pytest.mark.parametrize("level", ["INFO", "verbose", "warn", ""])
def test_a_bad_log_level(tmp_path: Path, level: str) -> None:
    message = refusal(write(tmp_path, f'[node]\nlog_level = "{level}"\n'))
    assert "[node] log_level must be one of debug, info, warning, error" in message


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("node1.example.com", "'node1.example.com' is not an IP address"),
        ("10.0.0.5:7835", "'10.0.0.5:7835' is not an IP address"),
        ("0.0.0.0", "0.0.0.0 is a wildcard"),
        ("::", ":: is a wildcard"),
        ("224.0.0.1", "224.0.0.1 is a multicast address"),
        ("ff02::1", "ff02::1 is a multicast address"),
        ("fe80::1%eth0", "fe80::1%eth0 names a network interface"),
    ],
)
def test_an_address_that_is_not_the_nodes_own(tmp_path: Path, address: str, expected: str) -> None:
    message = refusal(write(tmp_path, f'[node]\naddress = "{address}"\n'))
    assert f"[node] address {expected}" in message


def test_parse_address_names_what_it_parses() -> None:
    """The command line's --address goes through the same check, named as the flag."""
    assert parse_address("127.0.0.11", "--address") == ipaddress.IPv4Address("127.0.0.11")
    with pytest.raises(ConfigError, match=r"^--address 0\.0\.0\.0 is a wildcard"):
        parse_address("0.0.0.0", "--address")
