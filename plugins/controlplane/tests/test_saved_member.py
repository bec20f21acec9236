"""What a member keeps of its role on disk (``consensus.saved``), and the worker's decision
while the node's roles are unknown (``worker_controlplane.fold``): a node whose saved roles
are corrupt, its cluster's only consensus member, once waited for them for ever."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path

import pytest

from roleserve_controlplane.consensus import (
    MEMBERSHIP_FILE,
    PEERS_FILE,
    ConsensusCA,
    MembershipRecord,
    load_saved_member,
)
from roleserve_controlplane.consensus.certificates import write_tls_files
from roleserve_controlplane.consensus.saved import save_peers
from roleserve_controlplane.worker_controlplane import Startup, _wanted, fold
from roleserve_core import BootstrapRequest, ConsensusMember, NetworkStatus, NodeRoles
from roleserve_core.identity import NodeCredentials, certificate_to_pem
from roleserve_core.testing import ThrowawayCA

ADDRESS = ipaddress.IPv4Address("192.0.2.1")
PEERS = {"other": "https://192.0.2.2:7837"}


@pytest.fixture
def node() -> NodeCredentials:
    return ThrowawayCA().node()


def saved_member_in(directory: Path, node: NodeCredentials) -> ConsensusMember:
    """Write what a member of ``node`` keeps after a start with its role; that role."""
    consensus = ConsensusCA.create()
    member = consensus.member_credentials(node.node_id, [ADDRESS], node.key)
    write_tls_files(directory / "tls", member)
    save_peers(directory, PEERS)
    MembershipRecord(node.node_id, 1, 2, "join").save(directory / MEMBERSHIP_FILE)
    return ConsensusMember(
        ca_certificate=certificate_to_pem(consensus.certificate),
        peer_certificate=member.certificate_pem,
    )


def test_a_member_keeps_what_its_role_gave_it(tmp_path: Path, node: NodeCredentials) -> None:
    role = saved_member_in(tmp_path, node)
    saved = load_saved_member(tmp_path)
    assert saved is not None
    assert saved.name == node.node_id
    assert saved.peers == PEERS
    assert saved.credentials.certificate_pem == role.peer_certificate
    assert saved.credentials.ca_pem == role.ca_certificate


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: (d / MEMBERSHIP_FILE).unlink(),  # its bootstrap or join never committed
        lambda d: (d / PEERS_FILE).unlink(),  # last started by a version without peers.json
        lambda d: (d / PEERS_FILE).write_text('["a list"]'),
        lambda d: (d / "tls" / "member-key.pem").write_bytes(b"half a key"),
        lambda d: (d / "tls" / "ca.pem").unlink(),
        lambda d: (d / MEMBERSHIP_FILE).write_text('{"name": "n"}'),
    ],
)
def test_a_member_with_a_record_missing_or_damaged_is_not_saved(
    tmp_path: Path, node: NodeCredentials, damage: Callable[[Path], object]
) -> None:
    saved_member_in(tmp_path, node)
    damage(tmp_path)
    assert load_saved_member(tmp_path) is None


def test_with_the_roles_unknown_the_saved_member_starts_as_its_role_started_it(
    tmp_path: Path, node: NodeCredentials
) -> None:
    saved_member_in(tmp_path, node)
    saved = load_saved_member(tmp_path)
    assert saved is not None
    network = NetworkStatus(ADDRESS)

    startup = fold(None, None, node, network, saved)
    assert startup == Startup(
        ADDRESS, credentials=node, member=saved.credentials, peers=PEERS, saved=True
    )
    assert _wanted((None, None, node, network), saved)


def test_with_the_roles_unknown_and_no_saved_member_it_waits_for_them(
    node: NodeCredentials,
) -> None:
    network = NetworkStatus(ADDRESS)
    assert fold(None, None, node, network, None) == "waiting for the node's roles"
    assert not _wanted((None, None, node, network), None)


def test_another_nodes_saved_member_is_not_started(tmp_path: Path, node: NodeCredentials) -> None:
    """A member directory copied from another node (its record names that node)."""
    saved_member_in(tmp_path, ThrowawayCA().node())
    saved = load_saved_member(tmp_path)
    assert fold(None, None, node, NetworkStatus(ADDRESS), saved) == "waiting for the node's roles"


def test_known_roles_decide_over_the_saved_member(tmp_path: Path, node: NodeCredentials) -> None:
    role = saved_member_in(tmp_path, node)
    saved = load_saved_member(tmp_path)
    network = NetworkStatus(ADDRESS)

    without = NodeRoles()
    assert fold(without, None, node, network, saved) == "no consensus_member role"
    assert not _wanted((without, None, node, network), saved)

    given = NodeRoles(consensus_member=role)
    startup = fold(given, None, node, network, saved)
    assert isinstance(startup, Startup)
    assert (startup.saved, startup.peers) == (False, {})
    assert _wanted((given, None, node, network), saved)

    bootstrap = BootstrapRequest(node.key)
    assert fold(None, bootstrap, None, network, saved) == Startup(ADDRESS, bootstrap=bootstrap)
