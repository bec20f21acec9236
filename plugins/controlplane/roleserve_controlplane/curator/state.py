"""The cluster's state in etcd: typed records, and writes that only a leader can make.

::

    /cluster/secrets        ClusterSecrets (cluster CA, consensus CA)   written at bootstrap
    /cluster/configuration  ClusterConfiguration (heartbeat interval)
    /cluster/ticket         the register ticket
    /cluster/owner          OwnerRecord
    /nodes/<node ID>        NodeRecord, without its credentials    see records.py
    /nodes/<node ID>/credentials  its keys and certificates
    /join-keys/<sha256>     node ID
    /clusternet/prefixes/<cidr>  node ID          see prefixes.py
    /credentials/<name>     CredentialsRecord (issued user certificates)   see credentials.py

Every write is a transaction guarded twice: by the writer's leadership (its campaign key
must still exist, so a deposed leader cannot write) and by the record's modification
revision (optimistic concurrency: two writers of one node never lose an update; the loser
re-reads and retries). No in-process mutex is needed for correctness, and none would
survive a failover. The leader queues its own updates of one node record all the same (one
lock per node, held while the record is read, changed and written), and allocations of
prefixes are serialised too, only so that concurrent calls do not keep losing to each other:
50 renewals of one node at once used to spin through the retries without a pause, and some
gave up. A conflict left (a write outside ``update_node``) is retried after a short random
pause, growing with each conflict; ``update_node`` gives up only after
``MAX_CONFLICT_RETRIES``, with ``UpdateConflictError``, which callers may retry (ABORTED).

A node record's ``cluster_prefix`` and its prefix's key change together: ``update_node``
creates the key (it must not exist) when a prefix is given, and deletes it when the prefix
is taken away, in the record's own transaction.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
from google.protobuf.message import Message

from roleserve_controlplane.consensus import (
    DEFAULT_RETENTION,
    EtcdClient,
    Leadership,
    LeadershipLostError,
    compare_mod_revision,
    compare_version,
    delete_operation,
    get_operation,
    put_operation,
)
from roleserve_controlplane.consensus.client import Comparison, Operation
from roleserve_controlplane.curator.prefixes import PREFIXES_PREFIX, ClusterNetwork, prefix_key
from roleserve_controlplane.curator.records import (
    NODES_PREFIX,
    credentials_key,
    join_record,
    node_key,
    parse_node_key,
    record_writes,
    records_of,
    split_record,
)
from roleserve_controlplane.proto import state_pb2
from roleserve_core import RoleserveError, common_pb2

__all__ = [
    "APPROVED_STATES",
    "CONFIGURATION_KEY",
    "JOIN_KEYS_PREFIX",
    "LEADER_PREFIX",
    "NODES_PREFIX",
    "OWNER_KEY",
    "SECRETS_KEY",
    "TICKET_KEY",
    "ClusterState",
    "NodeNotFoundError",
    "StoredNode",
    "UpdateConflictError",
    "history_retention",
    "join_key_index",
    "node_key",
]

M = TypeVar("M", bound=Message)

SECRETS_KEY = "/cluster/secrets"
CONFIGURATION_KEY = "/cluster/configuration"
TICKET_KEY = "/cluster/ticket"
OWNER_KEY = "/cluster/owner"
JOIN_KEYS_PREFIX = "/join-keys/"
LEADER_PREFIX = "/leader/"

MAX_CONFLICT_RETRIES = 20
"""Concurrent updates of one node record before ``update_node`` gives up."""
CONFLICT_PAUSE_FIRST = 0.01
"""Seconds, at most, of the random pause after a node record's first conflict; doubled after
each conflict up to ``CONFLICT_PAUSE_MAX``. Random, so that writers that collided do not
collide again."""
CONFLICT_PAUSE_MAX = 0.5
MAX_ALLOCATION_RETRIES = 1000
"""Lost races for a free prefix before an allocating ``update_node`` gives up: each lost
race is another allocation that succeeded, so this only bounds a pathological loop."""

APPROVED_STATES = (common_pb2.NODE_STATE_STANDBY, common_pb2.NODE_STATE_UP)
"""The states in which a node holds a prefix of the cluster network."""


class NodeNotFoundError(RoleserveError, LookupError):
    """No node record has the requested ID."""


class UpdateConflictError(RoleserveError):
    """A node record kept changing while ``update_node`` updated it: nothing was written,
    and the caller may try again (the curator answers ABORTED)."""


@dataclass
class _Holders:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    count: int = 0
    """Tasks holding or waiting for ``lock``."""


class _KeyedLocks:
    """One lock per key, kept only while a task holds or waits for it: a map of every node
    ever updated would grow with each node ID a call names."""

    def __init__(self) -> None:
        self._holders: dict[str, _Holders] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        holders = self._holders.setdefault(key, _Holders())
        holders.count += 1
        try:
            async with holders.lock:
                yield
        finally:
            holders.count -= 1
            if not holders.count:
                del self._holders[key]


def join_key_index(join_key: bytes) -> str:
    """The etcd key that maps a join key (DER SPKI) to its node."""
    return JOIN_KEYS_PREFIX + hashlib.sha256(join_key).hexdigest()


def history_retention(configuration: state_pb2.ClusterConfiguration) -> float:
    """Seconds of etcd history the leading curator keeps (``consensus.maintenance``); the
    default when unset (a cluster bootstrapped before the field existed)."""
    if not configuration.HasField("history_retention"):
        return DEFAULT_RETENTION
    return configuration.history_retention.ToTimedelta().total_seconds()


def _parse(message: type[M], data: bytes) -> M:
    parsed = message()
    parsed.ParseFromString(data)
    return parsed


@dataclass(frozen=True, slots=True)
class StoredNode:
    """A node record and the revision it was read at (for compare-and-swap)."""

    record: state_pb2.NodeRecord
    mod_revision: int
    """Of the record's key (every write of the record puts it)."""
    credentials: state_pb2.NodeRecord | None
    """As stored under the credentials key; None for a record stored whole."""


def _record_update(stored: StoredNode, record: state_pb2.NodeRecord) -> list[Operation]:
    """The writes that replace ``stored`` by ``record``: the record's key always (its
    revision guards the next update), its credentials only when they changed."""
    rest, credentials = split_record(record)
    operations = [put_operation(node_key(record.id), rest.SerializeToString())]
    if credentials != stored.credentials:
        operations.append(
            put_operation(credentials_key(record.id), credentials.SerializeToString())
        )
    return operations


async def _pause_after_conflict(conflicts: int) -> None:
    """A random pause before the next try, up to a bound that doubles with each conflict."""
    bound = min(CONFLICT_PAUSE_MAX, CONFLICT_PAUSE_FIRST * 2 ** (conflicts - 1))
    await anyio.sleep(random.uniform(0, bound))


class ClusterState:
    """Typed reads and leader-guarded writes of the curator's records."""

    def __init__(self, client: EtcdClient, leadership: Leadership | None = None) -> None:
        self.client = client
        self.leadership = leadership
        """Writes require it; reads do not."""
        self._allocating = anyio.Lock()
        self._updating = _KeyedLocks()
        """The leader's own updates of one node, one at a time (module docstring)."""

    # -- reads ---------------------------------------------------------------------

    async def _get(self, key: str, message: type[M]) -> M | None:
        stored = await self.client.get(key)
        return _parse(message, stored.value) if stored is not None else None

    async def secrets(self) -> state_pb2.ClusterSecrets | None:
        """The cluster's keys, or None before bootstrap."""
        return await self._get(SECRETS_KEY, state_pb2.ClusterSecrets)

    async def configuration(self) -> state_pb2.ClusterConfiguration:
        """The cluster configuration (defaults if none is stored)."""
        stored = await self._get(CONFIGURATION_KEY, state_pb2.ClusterConfiguration)
        return stored or state_pb2.ClusterConfiguration()

    async def owner(self) -> state_pb2.OwnerRecord | None:
        """The owner's record, or None before bootstrap."""
        return await self._get(OWNER_KEY, state_pb2.OwnerRecord)

    async def ticket(self) -> bytes:
        """The register ticket (empty before bootstrap)."""
        stored = await self.client.get(TICKET_KEY)
        return stored.value if stored is not None else b""

    async def node(self, node_id: str) -> StoredNode | None:
        """One node's record, or None."""
        # One read of both keys (and of nothing else: another ID cannot extend this one,
        # but the filter does not rely on it).
        stored, _ = await self.client.get_prefix(node_key(node_id))
        parts = {kv.key: kv for kv in stored if parse_node_key(kv.key)[0] == node_id}
        rest = parts.get(node_key(node_id).encode())
        if rest is None:
            return None
        kept = parts.get(credentials_key(node_id).encode())
        credentials = _parse(state_pb2.NodeRecord, kept.value) if kept is not None else None
        record = join_record(_parse(state_pb2.NodeRecord, rest.value), credentials)
        return StoredNode(record, rest.mod_revision, credentials)

    async def nodes(self) -> tuple[list[state_pb2.NodeRecord], int]:
        """Every node record, and the revision they were read at."""
        stored, revision = await self.client.get_prefix(NODES_PREFIX)
        return list(records_of((kv.key, kv.value) for kv in stored).values()), revision

    async def allocated_prefixes(self) -> dict[str, str]:
        """Every allocated prefix of the cluster network, and the node it is allocated to."""
        stored, _ = await self.client.get_prefix(PREFIXES_PREFIX)
        return {kv.key.decode()[len(PREFIXES_PREFIX) :]: kv.value.decode() for kv in stored}

    async def node_of_join_key(self, join_key: bytes) -> str | None:
        """The ID of the node that registered ``join_key``, or None."""
        stored = await self.client.get(join_key_index(join_key))
        return stored.value.decode() if stored is not None else None

    # -- writes --------------------------------------------------------------------

    def _guard(self) -> list[Comparison]:
        if self.leadership is None:
            raise LeadershipLostError("writing cluster state needs a leadership")
        self.leadership.check()
        return [self.leadership.guard()]

    async def _commit(self, compare: Sequence[Comparison], success: Sequence[Operation]) -> bool:
        """Run a guarded transaction; False if ``compare`` failed (not the guard).

        :raises LeadershipLostError: if the leadership's key is gone.
        """
        guard = self._guard()  # first: without a leadership, LeadershipLostError
        assert self.leadership is not None
        result = await self.client.transaction(
            [*guard, *compare], success, [get_operation(self.leadership.key)]
        )
        if result.succeeded:
            return True
        if not result.responses[0].response_range.kvs:
            self.leadership.lose("its campaign key is gone: another curator may lead")
            raise LeadershipLostError("this curator is no longer the leader")
        return False

    async def create_node(self, record: state_pb2.NodeRecord) -> bool:
        """Write a new node record, and its join key's index; False if the node exists or
        its join key is another's (an index once written is never pointed elsewhere)."""
        compare = [compare_version(node_key(record.id), "=", 0)]
        operations = [put_operation(key, value) for key, value in record_writes(record)]
        if record.join_key:
            compare.append(compare_version(join_key_index(record.join_key), "=", 0))
            operations.append(put_operation(join_key_index(record.join_key), record.id))
        return await self._commit(compare, operations)

    async def update_node(
        self,
        node_id: str,
        change: Callable[[state_pb2.NodeRecord], None],
        *,
        allocate: ClusterNetwork | None = None,
        read: StoredNode | None = None,
    ) -> state_pb2.NodeRecord:
        """Read a node record, ``change`` it, and write it back unless someone else wrote it
        meanwhile; then start over. ``change`` may raise to refuse the update.

        ``read`` is the record as the caller has just read it, changed at the first try
        instead of reading it again (one etcd round trip less on the way of a role change);
        the write compares its revision all the same, so a record changed since is read
        again and changed anew.

        With ``allocate``, a node that is approved after the change (STANDBY or UP) and has
        no prefix is given the lowest free prefix of that network in the same transaction.
        A change that clears ``cluster_prefix`` frees the prefix.

        :raises NodeNotFoundError: if there is no such node.
        :raises PrefixesExhaustedError: if a prefix is due and none is free (nothing is
            written).
        """
        async with contextlib.AsyncExitStack() as held:
            if allocate is not None:  # always before the node's lock: no lock order inverts
                await held.enter_async_context(self._allocating)
            await held.enter_async_context(self._updating.hold(node_id))
            return await self._update_node(node_id, change, allocate, read)

    async def _update_node(
        self,
        node_id: str,
        change: Callable[[state_pb2.NodeRecord], None],
        allocate: ClusterNetwork | None,
        read: StoredNode | None,
    ) -> state_pb2.NodeRecord:
        conflicts = races = 0
        while conflicts < MAX_CONFLICT_RETRIES and races < MAX_ALLOCATION_RETRIES:
            stored, read = read or await self.node(node_id), None
            if stored is None:
                raise NodeNotFoundError(f"no node {node_id}")
            record = state_pb2.NodeRecord()
            record.CopyFrom(stored.record)
            change(record)
            due = allocate is not None and record.state in APPROVED_STATES
            if due and not record.cluster_prefix:
                assert allocate is not None
                record.cluster_prefix = str(allocate.first_free(await self.allocated_prefixes()))
            if record == stored.record:
                return record
            compare = [compare_mod_revision(node_key(node_id), "=", stored.mod_revision)]
            operations = _record_update(stored, record)
            before, after = stored.record.cluster_prefix, record.cluster_prefix
            if after != before:
                if before:
                    operations.append(delete_operation(prefix_key(before)))
                if after:
                    compare.append(compare_version(prefix_key(after), "=", 0))
                    operations.append(put_operation(prefix_key(after), node_id))
            if await self._commit(compare, operations):
                return record
            if after and after != before and await self.client.get(prefix_key(after)):
                races += 1  # another node got that prefix first: take the next one
            else:
                conflicts += 1
                await _pause_after_conflict(conflicts)
        if races:
            raise RoleserveError(f"node {node_id} lost {races} races for a free prefix")
        raise UpdateConflictError(
            f"node {node_id}'s record changed {conflicts} times while this call updated it"
        )

    async def create(self, key: str, value: Message) -> bool:
        """Write a record that must not exist yet; False if it does (nothing written)."""
        compare = [compare_version(key, "=", 0)]
        return await self._commit(compare, [put_operation(key, value.SerializeToString())])

    async def replace(self, key: str, value: Message, mod_revision: int) -> bool:
        """Overwrite a record read at ``mod_revision``; False if it changed since."""
        compare = [compare_mod_revision(key, "=", mod_revision)]
        return await self._commit(compare, [put_operation(key, value.SerializeToString())])

    async def put(self, key: str, value: bytes | Message) -> None:
        """Write one record under the leadership's guard."""
        data = value if isinstance(value, bytes) else value.SerializeToString()
        await self._commit([], [put_operation(key, data)])

    async def initialise(self, writes: Sequence[tuple[str, bytes]]) -> bool:
        """Write ``writes`` at once if the cluster has no secrets yet (bootstrap); False if
        it has (a repeated bootstrap: nothing is written).

        The one write without a leadership: at bootstrap no curator runs yet, and the
        comparison makes it happen at most once.
        """
        result = await self.client.transaction(
            [compare_version(SECRETS_KEY, "=", 0)],
            [put_operation(key, data) for key, data in writes],
        )
        return result.succeeded
