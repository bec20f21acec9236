"""Where a local cluster's nodes live: node 1's address, the others after it, and the
record of it that later commands read (no processes are started here)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from roleserve_core.localcluster import (
    FIRST_ADDRESS,
    LocalCluster,
    LocalClusterError,
    saved_first_address,
)

OTHER = ipaddress.IPv4Address("127.0.1.11")


def addresses(cluster: LocalCluster) -> list[str]:
    return [str(node.address) for node in cluster.nodes]


def test_nodes_follow_the_first_address(tmp_path: Path) -> None:
    assert addresses(LocalCluster(tmp_path, 3)) == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    assert addresses(LocalCluster(tmp_path, 2, first_address=OTHER)) == [
        "127.0.1.11",
        "127.0.1.12",
    ]


def test_every_node_must_be_on_loopback(tmp_path: Path) -> None:
    last = ipaddress.IPv4Address("127.255.255.254")
    LocalCluster(tmp_path, 2, first_address=last)
    too_many = re.escape("3 nodes from 127.255.255.254 do not all fit")
    with pytest.raises(LocalClusterError, match=too_many):
        LocalCluster(tmp_path, 3, first_address=last)
    with pytest.raises(LocalClusterError, match=re.escape("do not all fit in 127.0.0.0/8")):
        LocalCluster(tmp_path, 1, first_address=ipaddress.IPv4Address("10.0.0.1"))


def test_a_saved_first_address_is_where_the_cluster_stays(tmp_path: Path) -> None:
    assert saved_first_address(tmp_path) is None
    (tmp_path / "n1").mkdir()
    (tmp_path / "first-address").write_text(f"{OTHER}\n")
    assert saved_first_address(tmp_path) == OTHER
    assert addresses(LocalCluster.existing(tmp_path)) == [str(OTHER)]
    with pytest.raises(LocalClusterError) as refused:
        LocalCluster(tmp_path, 1, first_address=FIRST_ADDRESS)
    assert str(refused.value) == (
        f"the cluster in {tmp_path} runs from {OTHER}, not {FIRST_ADDRESS}; give "
        f"--first-address {OTHER} (or none), or another --dir"
    )


def test_a_cluster_from_before_the_record_is_at_the_default(tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir()
    assert addresses(LocalCluster.existing(tmp_path)) == [str(FIRST_ADDRESS)]


def test_a_corrupt_record_is_named(tmp_path: Path) -> None:
    (tmp_path / "first-address").write_text("localhost\n")
    with pytest.raises(LocalClusterError) as refused:
        saved_first_address(tmp_path)
    record = tmp_path / "first-address"
    assert str(refused.value) == f"{record} holds 'localhost', not an IPv4 address"
