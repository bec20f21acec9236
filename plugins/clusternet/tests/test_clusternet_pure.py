"""The plain functions: the key file, which peers the cluster asks for, the UAPI text."""

from __future__ import annotations

import base64
import ipaddress
import logging
import stat
import time
from pathlib import Path

import pytest

from roleserve_clusternet.device import DeviceChange, PeerConfig, PeerState
from roleserve_clusternet.errors import KeyFileError, UapiError
from roleserve_clusternet.interface import parse_wireguard_go
from roleserve_clusternet.peers import Skipped, announced, own_address, plan, wanted_peers
from roleserve_clusternet.privatekey import KEY_FILE, WireGuardKey, load_or_create_key
from roleserve_clusternet.uapi import encode_set, parse_get
from roleserve_clusternet.values import ClusternetStatus, PeerStatus
from roleserve_core import ClusterNodes, FinalError, common_pb2, curator_pb2

net = ipaddress.ip_network
KEY_A = WireGuardKey.generate()
KEY_B = WireGuardKey.generate()
OWN = WireGuardKey.generate()


# -- the key file -----------------------------------------------------------------------


def test_a_new_key_is_written_0600_and_reused(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "data")
    path = tmp_path / "data" / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert base64.b64decode(path.read_text()) == key.private
    assert load_or_create_key(tmp_path / "data") == key
    assert len(key.public) == 32
    assert base64.b64encode(key.private).decode() not in repr(key)


def test_a_key_written_by_wg_genkey_is_read(tmp_path: Path) -> None:
    key = WireGuardKey.generate()
    (tmp_path / KEY_FILE).write_text(base64.b64encode(key.private).decode() + "\n")
    (tmp_path / KEY_FILE).chmod(0o644)
    assert load_or_create_key(tmp_path) == key
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "0 bytes, not 32"),
        (b"not base64!\n", "not base64"),
        (base64.b64encode(b"x" * 31) + b"\n", "31 bytes, not 32"),
        (b"\xff\xfe", "not text"),
    ],
)
def test_a_corrupt_key_file_is_reported_and_kept(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / KEY_FILE
    path.write_bytes(content)
    with pytest.raises(KeyFileError) as caught:
        load_or_create_key(tmp_path)
    assert isinstance(caught.value, FinalError)
    assert str(caught.value) == (
        f"the WireGuard key file {path} is corrupt ({problem}); remove it to make a new key "
        "(the node's public key changes)"
    )
    assert path.read_bytes() == content  # never replaced


# -- wanted peers -----------------------------------------------------------------------


def node(
    node_id: str,
    key: WireGuardKey | str | None,
    prefixes: list[str],
    address: str = "",
    state: int = common_pb2.NODE_STATE_UP,
    cluster_prefix: str = "",
) -> curator_pb2.Node:
    record = curator_pb2.Node(id=node_id, state=state, cluster_prefix=cluster_prefix)  # type: ignore[arg-type]
    record.status.external_address = address
    if key is not None:
        text = key.public_base64 if isinstance(key, WireGuardKey) else key
        record.clusternet.wireguard_pubkey = text
        record.clusternet.prefixes.extend(prefixes)
    return record


def view(*records: curator_pb2.Node) -> ClusterNodes:
    return ClusterNodes({record.id: record for record in records}, backlogged=True)


def test_every_other_node_with_a_key_is_a_peer() -> None:
    wanted = wanted_peers(
        view(
            node("node-own", OWN, ["10.192.0.1/32"], "10.0.0.1"),
            node("node-a", KEY_A, ["10.192.1.1/32", "10.100.0.0/24", "10.192.1.1/32"], "10.0.0.2"),
            node("node-b", KEY_B, ["fd00:1::/64"], "fd00::3"),
            node("node-new", None, [], "10.0.0.4"),  # not announced yet
        ),
        "node-own",
        OWN.public,
        port=7838,
        keepalive=25,
    )
    assert dict(wanted.peers) == {
        KEY_A.public: PeerConfig(
            KEY_A.public, "10.0.0.2:7838", (net("10.100.0.0/24"), net("10.192.1.1/32")), 25
        ),
        KEY_B.public: PeerConfig(KEY_B.public, "[fd00::3]:7838", (net("fd00:1::/64"),), 25),
    }
    assert dict(wanted.nodes) == {KEY_A.public: "node-a", KEY_B.public: "node-b"}
    assert wanted.skipped == ()


def test_bad_records_are_skipped_with_their_reason_and_decommissioned_dropped() -> None:
    wanted = wanted_peers(
        view(
            node("node-a", KEY_A, ["10.192.1.1/32"], "10.0.0.2"),
            node("node-b", "c2hvcnQ=", [], "10.0.0.3"),
            node("node-c", KEY_B, ["10.192.3.0/33"], "10.0.0.4"),
            node("node-d", KEY_B, [], "not an address"),
            node("node-e", OWN, [], "10.0.0.6"),
            node("node-f", KEY_A, [], "10.0.0.7"),
            node("node-g", KEY_B, [], "10.0.0.8", common_pb2.NODE_STATE_DECOMMISSIONED),
            node("node-h", KEY_B, [], ""),
        ),
        "node-own",
        OWN.public,
        port=7838,
        keepalive=0,
    )
    assert sorted(wanted.nodes.values()) == ["node-a", "node-h"]
    assert wanted.peers[KEY_B.public] == PeerConfig(KEY_B.public, None, (), 0)
    assert wanted.skipped == (
        Skipped("node-b", "a WireGuard key that does not parse (5 bytes, not 32): 'c2hvcnQ='"),
        Skipped("node-c", "a prefix that does not parse: '10.192.3.0/33'"),
        Skipped("node-d", "an address that does not parse: 'not an address'"),
        Skipped("node-e", f"this node's own WireGuard key {OWN.public_base64}"),
        Skipped("node-f", f"the WireGuard key {KEY_A.public_base64} of node-a"),
    )


def test_prefixes_are_compared_by_value() -> None:
    """Monogon compared prefix slices by pointer: every node with one changed every time."""
    first = wanted_peers(
        view(node("node-a", KEY_A, ["10.1.0.0/24", "10.2.0.0/24"], "10.0.0.2")),
        "node-own",
        OWN.public,
        port=7838,
        keepalive=25,
    )
    again = wanted_peers(
        view(node("node-a", KEY_A, ["10.2.0.0/24", "10.1.0.0/24"], "10.0.0.2")),
        "node-own",
        OWN.public,
        port=7838,
        keepalive=25,
    )
    assert first.peers == again.peers
    assert not plan(first.peers, again.peers)


def test_plan_sets_what_differs_and_removes_what_is_not_wanted() -> None:
    a = PeerConfig(KEY_A.public, "10.0.0.2:7838", (net("10.1.0.0/24"),), 25)
    b = PeerConfig(KEY_B.public, "10.0.0.3:7838", (), 25)
    moved = PeerConfig(KEY_A.public, "10.0.0.9:7838", (net("10.1.0.0/24"),), 25)
    assert plan({}, {KEY_A.public: a}) == DeviceChange(peers=(a,))
    assert plan({KEY_A.public: a, KEY_B.public: b}, {KEY_A.public: moved}) == DeviceChange(
        peers=(moved,), remove=(KEY_B.public,)
    )
    assert not plan({KEY_A.public: a}, {KEY_A.public: a})
    # a peer wanted without an endpoint keeps the one WireGuard learnt
    roaming = PeerConfig(KEY_B.public, None, (), 25)
    assert not plan({KEY_B.public: b}, {KEY_B.public: roaming})


def test_own_address_is_the_first_host_of_the_cluster_prefix_alone() -> None:
    assert own_address(None) is None
    assert own_address(node("n", None, [])) is None
    own = own_address(node("n", None, [], cluster_prefix="10.192.3.0/24"))
    assert own == ipaddress.ip_interface("10.192.3.1/32")
    assert own_address(node("n", None, [], cluster_prefix="fd00:1::/64")) == (
        ipaddress.ip_interface("fd00:1::1/128")
    )
    with pytest.raises(ValueError, match="99"):
        own_address(node("n", None, [], cluster_prefix="10.192.3.0/99"))
    assert own is not None
    pods = (net("10.244.1.0/24"), net("10.192.3.1/32"))
    assert announced(own, pods) == ["10.192.3.1/32", "10.244.1.0/24"]


# -- UAPI text --------------------------------------------------------------------------


def test_encode_set() -> None:
    a = PeerConfig(KEY_A.public, "10.0.0.2:7838", (net("10.1.0.0/24"), net("10.9.0.1/32")), 25)
    b = PeerConfig(KEY_B.public, None, (), 0)
    change = DeviceChange(OWN.private, 7838, (a, b), (OWN.public,))
    assert encode_set(change) == (
        "set=1\n"
        f"private_key={OWN.private.hex()}\n"
        "listen_port=7838\n"
        f"public_key={OWN.public.hex()}\nremove=true\n"
        f"public_key={KEY_A.public.hex()}\n"
        "endpoint=10.0.0.2:7838\n"
        "persistent_keepalive_interval=25\n"
        "replace_allowed_ips=true\n"
        "allowed_ip=10.1.0.0/24\n"
        "allowed_ip=10.9.0.1/32\n"
        f"public_key={KEY_B.public.hex()}\n"
        "persistent_keepalive_interval=0\n"
        "replace_allowed_ips=true\n"
        "\n"
    )
    assert encode_set(DeviceChange()) == "set=1\n\n"


def test_parse_get() -> None:
    answer = (
        f"private_key={OWN.private.hex()}\n"
        "listen_port=7838\n"
        f"public_key={KEY_A.public.hex()}\n"
        f"preshared_key={'0' * 64}\n"
        "protocol_version=1\n"
        "endpoint=[fd00::2]:7838\n"
        "last_handshake_time_sec=1700000000\n"
        "last_handshake_time_nsec=500000000\n"
        "tx_bytes=1024\n"
        "rx_bytes=2048\n"
        "persistent_keepalive_interval=25\n"
        "allowed_ip=10.9.0.1/32\n"
        "allowed_ip=10.1.0.0/24\n"
        f"public_key={KEY_B.public.hex()}\n"
        "last_handshake_time_sec=0\n"
        "last_handshake_time_nsec=0\n"
        "tx_bytes=0\n"
        "rx_bytes=0\n"
        "persistent_keepalive_interval=0\n"
        "errno=0\n"
        "\n"
    )
    state = parse_get(answer)
    assert (state.private_key, state.listen_port) == (OWN.private, 7838)
    assert dict(state.peers) == {
        KEY_A.public: PeerState(
            KEY_A.public,
            "[fd00::2]:7838",
            (net("10.1.0.0/24"), net("10.9.0.1/32")),
            25,
            1700000000.5,
            2048,
            1024,
        ),
        KEY_B.public: PeerState(KEY_B.public, None, (), 0, None, 0, 0),
    }


def test_parse_get_of_a_fresh_device_and_of_errors() -> None:
    state = parse_get("private_key=" + "0" * 64 + "\nlisten_port=0\nerrno=0\n\n")
    assert (state.private_key, state.listen_port, dict(state.peers)) == (None, 0, {})
    with pytest.raises(UapiError, match="errno=-22"):
        parse_get("errno=-22\n\n")
    with pytest.raises(UapiError, match="does not parse"):
        parse_get("public_key=zz\nerrno=0\n\n")


def test_the_status_reads_in_one_line() -> None:
    """What ``roleserve ctl values`` shows (the value's repr)."""
    assert repr(ClusternetStatus.NONE) == "ClusternetStatus(not up)"
    peers = (
        PeerStatus("node-a", KEY_A.public_base64, "10.0.0.2:7838", ("10.192.1.1/32",), 1.0, 5, 6),
        PeerStatus("node-b", KEY_B.public_base64, None, (), None, 0, 0),
    )
    status = ClusternetStatus("clusternet", OWN.public_base64, 7838, ("10.192.7.1/32",), peers)
    assert repr(status) == (
        f"ClusternetStatus(clusternet port 7838, key {OWN.public_base64[:8]}…, announcing "
        "10.192.7.1/32; 2 peers, 1 with a handshake)"
    )


def test_wireguard_go_lines_at_their_level() -> None:
    assert parse_wireguard_go("ERROR: (clusternet) 2026/12/03 10:00:00 Failed to bind") == (
        logging.ERROR,
        "(clusternet) 2026/12/03 10:00:00 Failed to bind",
    )
    assert parse_wireguard_go("DEBUG: (clusternet) peer(x) - Sending keepalive")[0] == (
        logging.DEBUG
    )
    assert parse_wireguard_go("INFO: (clusternet) Device started")[0] == logging.INFO
    assert parse_wireguard_go("│   Running wireguard-go is not required   │")[0] == (logging.DEBUG)
    assert parse_wireguard_go("anything else") == (logging.INFO, "anything else")


def test_the_status_details_list_every_peer() -> None:
    now = time.time()
    status = ClusternetStatus(
        "clusternet",
        "a2V5",
        7838,
        ("10.192.0.1/32",),
        (
            PeerStatus(
                "node-a", "cGVlcg==", "10.0.0.2:7838", ("10.192.1.1/32",), now - 5, 652, 500
            ),
            PeerStatus("", "b3JwaGFu", None, (), None, 0, 0),
        ),
    )
    lines = status.details().splitlines()
    assert lines[:4] == [
        "interface clusternet, UDP port 7838",
        "public key a2V5",
        "announcing 10.192.0.1/32",
        "2 peers:",
    ]
    assert lines[4].split() == [
        "node-a", "cGVlcg==", "at", "10.0.0.2:7838", "allowed", "10.192.1.1/32",
        "handshake", "5s", "ago", "rx", "652", "B", "tx", "500", "B",
    ]  # fmt: skip
    assert "(no node)" in lines[5]
    assert "handshake never" in lines[5]
    assert ClusternetStatus.NONE.details() == "the interface is not up"
