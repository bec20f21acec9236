"""What a member keeps on disk of the role it started with: enough to start again while
the node's roles are unknown.

The ``consensus_member`` role gives a member three things: its member certificate, the
consensus CA, and its peers. The member writes the first two (with the node's key) as its
TLS files at every start (``tls/``, ``certificates.write_tls_files``), and its peers in
``peers.json`` (``save_peers``: those its start planned; atomically); its membership
record (``membership.json``) says its bootstrap or join committed. Together that is a
``SavedMember``: everything the role would give, kept by the member itself.

Why: the node's roles come from the curator, and are saved in ``roles.pb`` for restarts.
With that file corrupt (or gone) on a node that is its cluster's only consensus member,
the roles would never come: the curator runs on etcd, and etcd waited for the role. So
while the roles are unknown (not: known without the role), the ``controlplane`` worker
starts the member from these records, a restart on its data (etcd: "existing"), with the
membership checks of every restart (``record.plan_start``, ``record.check_membership``:
a cluster that removed the member refuses it, and nothing is deleted). The roles, once
known, confirm it, or take it away (the worker then stops it; the data stays).

A member whose records are not all there, or not readable (a member last started by a
version that did not write ``peers.json``, a damaged file), is not a saved member: the node
then waits for its roles, as before. Its next start with the role writes what is missing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from roleserve_controlplane.consensus.certificates import read_tls_files
from roleserve_controlplane.consensus.errors import MembershipRecordError
from roleserve_core import IdentityError, write_atomically
from roleserve_core.identity import Credentials

__all__ = ["MEMBERSHIP_FILE", "PEERS_FILE", "SavedMember", "load_saved_member", "save_peers"]

MEMBERSHIP_FILE = "membership.json"
"""In the member's directory: written once the member's bootstrap or join committed (by
``record``, which exports it too)."""
PEERS_FILE = "peers.json"
"""In the member's directory: the peers its last start planned (name → peer URL)."""


@dataclass(frozen=True)
class SavedMember:
    """A member's own records of its last start (see the module docstring)."""

    name: str
    """The member's name in its membership record: its node's ID."""
    credentials: Credentials
    """Its member certificate and key, and the consensus CA, from its TLS files."""
    peers: Mapping[str, str]
    """Its peers, name → peer URL (empty for a member that bootstrapped its cluster)."""


def save_peers(directory: Path, peers: Mapping[str, str]) -> None:
    """Write ``peers`` as the member's ``peers.json`` (atomically: a crash leaves the old
    file or the new one)."""
    text = json.dumps(dict(sorted(peers.items())), indent=2)
    write_atomically(directory / PEERS_FILE, text.encode() + b"\n")


def load_saved_member(directory: Path) -> SavedMember | None:
    """The member saved in ``directory``; None unless its membership record, TLS files and
    peers are all there and readable."""
    if not (directory / MEMBERSHIP_FILE).exists():
        return None
    # Here, not at the top: the record's module imports etcd's client, which a node that
    # never was a member (the controlplane worker asks on every node) does not load.
    from roleserve_controlplane.consensus.record import MembershipRecord

    try:
        record = MembershipRecord.load(directory / MEMBERSHIP_FILE)
        if record is None:
            return None
        peers = json.loads((directory / PEERS_FILE).read_bytes())
        if not isinstance(peers, dict) or not all(
            isinstance(name, str) and isinstance(url, str) for name, url in peers.items()
        ):
            return None
        credentials = read_tls_files(directory / "tls")
    except (OSError, ValueError, MembershipRecordError, IdentityError):
        return None
    return SavedMember(record.name, credentials, peers)
