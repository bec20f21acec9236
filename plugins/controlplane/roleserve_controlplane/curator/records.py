"""How a node record is laid out in etcd: two keys, so that a role change writes little.

::

    /nodes/<node ID>              the record without its credentials: state, roles,
                                  status, labels, networking (a few hundred bytes)
    /nodes/<node ID>/credentials  its keys and certificates: public key, join key, node
                                  certificate, etcd CA and peer certificate (~2.3 KB)

Every write of a record is a transaction that puts the first key, and the second only when
the credentials changed (enrolment, renewal, joining or leaving consensus). Role changes,
status and labels therefore write only the small key.

Why it matters: etcd keeps its recent raft log in memory (the entries since its last
snapshot, and 5,000 more for followers that fall behind, in 3.4), and a whole record per
role change made that log, and each member's RSS, grow by ~2.7 KB per change and stay there
after compaction and defragmentation (``benchmarks/etcd.py`` (e3), docs/consensus.md).

A record stored whole under ``/nodes/<node ID>`` (written before this layout) reads as it
always did: it has no credentials key, and its first write splits it.
"""

from __future__ import annotations

from collections.abc import Iterable

from roleserve_controlplane.proto import state_pb2

__all__ = [
    "CREDENTIALS_SUFFIX",
    "NODES_PREFIX",
    "credentials_key",
    "join_record",
    "joined",
    "node_key",
    "parse_node_key",
    "parts_of",
    "record_writes",
    "records_of",
    "split_record",
]

NODES_PREFIX = "/nodes/"
CREDENTIALS_SUFFIX = "/credentials"

_CREDENTIAL_FIELDS = ("public_key", "join_key", "certificate")
_CONSENSUS_CREDENTIAL_FIELDS = ("ca_certificate", "peer_certificate")


def node_key(node_id: str) -> str:
    """The etcd key of a node's record (without its credentials)."""
    return NODES_PREFIX + node_id


def credentials_key(node_id: str) -> str:
    """The etcd key of a node's credentials."""
    return node_key(node_id) + CREDENTIALS_SUFFIX


def parse_node_key(key: bytes) -> tuple[str, bool]:
    """The node ID of a key under ``/nodes/``, and whether it is the credentials key."""
    rest = key.decode().removeprefix(NODES_PREFIX)
    node_id, _, part = rest.partition("/")
    return node_id, part == CREDENTIALS_SUFFIX[1:]


def split_record(record: state_pb2.NodeRecord) -> tuple[state_pb2.NodeRecord, state_pb2.NodeRecord]:
    """The record without its credentials, and its credentials (a record with only them)."""
    rest = state_pb2.NodeRecord()
    rest.CopyFrom(record)
    credentials = state_pb2.NodeRecord()
    for name in _CREDENTIAL_FIELDS:
        setattr(credentials, name, getattr(record, name))
        rest.ClearField(name)  # type: ignore[arg-type]
    if record.roles.HasField("consensus_member"):
        member = record.roles.consensus_member
        stored = credentials.roles.consensus_member
        for name in _CONSENSUS_CREDENTIAL_FIELDS:
            setattr(stored, name, getattr(member, name))
            # The role stays present in ``rest`` (an empty message is still set).
            rest.roles.consensus_member.ClearField(name)  # type: ignore[arg-type]
    return rest, credentials


def join_record(
    rest: state_pb2.NodeRecord, credentials: state_pb2.NodeRecord | None
) -> state_pb2.NodeRecord:
    """The whole record from its two parts (``credentials`` None: a record stored whole).

    The consensus certificates join only a record that has the role: the role's presence
    is decided by ``rest``, which every write puts."""
    record = state_pb2.NodeRecord()
    record.CopyFrom(rest)
    if credentials is None:
        return record
    for name in _CREDENTIAL_FIELDS:
        setattr(record, name, getattr(credentials, name))
    if record.roles.HasField("consensus_member"):
        member = record.roles.consensus_member
        for name in _CONSENSUS_CREDENTIAL_FIELDS:
            setattr(member, name, getattr(credentials.roles.consensus_member, name))
    return record


def record_writes(record: state_pb2.NodeRecord) -> list[tuple[str, bytes]]:
    """The keys and values that store a new ``record`` whole."""
    rest, credentials = split_record(record)
    return [
        (node_key(record.id), rest.SerializeToString()),
        (credentials_key(record.id), credentials.SerializeToString()),
    ]


Parts = dict[str, state_pb2.NodeRecord]
"""Node ID → one of its two keys, parsed."""


def parts_of(stored: Iterable[tuple[bytes, bytes]]) -> tuple[Parts, Parts]:
    """The records without credentials, and the credentials, of the keys under ``/nodes/``
    (key, value), each parsed once."""
    rests: Parts = {}
    credentials: Parts = {}
    for key, value in stored:
        node_id, is_credentials = parse_node_key(key)
        (credentials if is_credentials else rests)[node_id] = state_pb2.NodeRecord.FromString(value)
    return rests, credentials


def joined(rests: Parts, credentials: Parts) -> Parts:
    """Whole records from their parts; credentials without their record (a torn read cannot
    make one: both are written in one transaction) are left out."""
    return {node_id: join_record(rest, credentials.get(node_id)) for node_id, rest in rests.items()}


def records_of(stored: Iterable[tuple[bytes, bytes]]) -> Parts:
    """Whole records from the keys under ``/nodes/`` (key, value)."""
    return joined(*parts_of(stored))
