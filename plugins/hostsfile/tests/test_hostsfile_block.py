"""The managed block as plain functions: which nodes it lists and where it goes."""

from __future__ import annotations

import ipaddress

import pytest

from roleserve_core import common_pb2, curator_pb2
from roleserve_core.testing import node_record
from roleserve_hostsfile.block import (
    BEGIN,
    END,
    MalformedBlockError,
    Skipped,
    fold_addresses,
    merge_block,
    render_block,
)

OWN = "node-0000aaaa"


def view(*nodes: curator_pb2.Node) -> dict[str, curator_pb2.Node]:
    return {node.id: node for node in nodes}


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def test_every_node_with_an_address_this_one_included_sorted_by_id() -> None:
    nodes = view(
        node_record("node-b", "10.0.0.2"), node_record("node-a", "10.0.0.1"), node_record("node-c")
    )
    fold = fold_addresses({}, nodes, OWN, ip("10.0.0.9"))
    assert render_block(fold.addresses) == (
        BEGIN + b"\n10.0.0.9 node-0000aaaa\n10.0.0.1 node-a\n10.0.0.2 node-b\n" + END + b"\n"
    )
    assert fold.skipped == ()


def test_own_address_comes_from_the_network_status_before_its_record() -> None:
    nodes = view(node_record(OWN, "10.0.0.1"))
    assert fold_addresses({}, nodes, OWN, ip("10.0.0.7")).addresses == {OWN: ip("10.0.0.7")}
    assert fold_addresses({}, nodes, OWN, None).addresses == {OWN: ip("10.0.0.1")}


def test_ipv6_addresses() -> None:
    fold = fold_addresses({}, view(node_record("node-a", "fd00::1:2")), OWN, ip("2001:db8::9"))
    assert b"2001:db8::9 node-0000aaaa\nfd00::1:2 node-a\n" in render_block(fold.addresses)


def test_addresses_that_do_not_parse_are_skipped_and_named() -> None:
    nodes = view(
        node_record("node-a", "10.0.0.300"),
        node_record("node-b", "fe80::1%eth0"),
        node_record("node ok", "10.0.0.3"),
        node_record("node-c", "10.0.0.4"),
    )
    fold = fold_addresses({"node-a": ip("10.0.0.1")}, nodes, OWN, None)
    # node-a keeps the address it had: one bad record does not take its name away
    assert fold.addresses == {"node-a": ip("10.0.0.1"), "node-c": ip("10.0.0.4")}
    assert fold.skipped == (
        Skipped("node ok", "node ok", "a node ID that is no host name"),
        Skipped("node-a", "10.0.0.300", "an address that does not parse"),
        Skipped("node-b", "fe80::1%eth0", "an address with a zone"),
    )


def test_vanished_nodes_are_kept_decommissioned_ones_removed() -> None:
    first = fold_addresses(
        {}, view(node_record("node-a", "10.0.0.1"), node_record("node-b", "10.0.0.2")), OWN, None
    )
    vanished = fold_addresses(first.addresses, view(node_record("node-b", "10.0.0.2")), OWN, None)
    assert vanished.addresses == first.addresses
    gone = node_record("node-b", "10.0.0.2", state=common_pb2.NODE_STATE_DECOMMISSIONED)
    decommissioned = fold_addresses(vanished.addresses, view(gone), OWN, None)
    assert decommissioned.addresses == {"node-a": ip("10.0.0.1")}


def test_a_moved_node_is_listed_at_its_new_address() -> None:
    first = fold_addresses({}, view(node_record("node-a", "10.0.0.1")), OWN, None)
    moved = fold_addresses(first.addresses, view(node_record("node-a", "fd00::1")), OWN, None)
    assert moved.addresses == {"node-a": ip("fd00::1")}


HOSTS = b"127.0.0.1 localhost\r\n# the operator's comment\n::1 localhost ip6-localhost\n"


def test_a_file_without_a_block_gets_one_appended() -> None:
    block = render_block({"node-a": ip("10.0.0.1")})
    assert merge_block(HOSTS, block) == HOSTS + block
    assert merge_block(b"127.0.0.1 localhost", block) == b"127.0.0.1 localhost\n" + block
    assert merge_block(None, block) == block
    assert merge_block(b"", block) == block


def test_lines_outside_the_block_survive_byte_for_byte() -> None:
    old = render_block({"node-a": ip("10.0.0.1")})
    new = render_block({"node-b": ip("10.0.0.2")})
    after = b"10.9.9.9 mine   # the operator's, after the block\n\n  \nno newline at the end"
    merged = merge_block(HOSTS + old + after, new)
    assert merged == HOSTS + new + after


def test_re_rendering_the_same_nodes_gives_identical_bytes() -> None:
    addresses = {"node-b": ip("fd00::2"), "node-a": ip("10.0.0.1")}
    once = merge_block(HOSTS, render_block(addresses))
    twice = merge_block(once, render_block(dict(reversed(addresses.items()))))
    assert twice == once


def test_markers_with_other_line_endings_are_still_the_block() -> None:
    crlf = BEGIN + b"\r\n10.0.0.1 node-a\r\n" + END + b"  \r\n"
    new = render_block({})
    assert merge_block(HOSTS + crlf + b"tail\n", new) == HOSTS + new + b"tail\n"


def test_a_second_block_is_dropped() -> None:
    old = render_block({"node-a": ip("10.0.0.1")})
    new = render_block({})
    assert merge_block(old + b"middle\n" + old, new) == new + b"middle\n"


def test_a_block_without_its_end_is_refused_rather_than_taking_the_rest() -> None:
    with pytest.raises(MalformedBlockError, match="has no line '# END roleserve managed block'"):
        merge_block(HOSTS + BEGIN + b"\n10.0.0.1 node-a\nthe operator's line\n", b"")
