"""Our small adapter over an etcd v3 client: the only module that knows etcd3aio.

::

    curator, membership, election
              │ EtcdClient: get / get_prefix / put / delete / transaction / watch_prefix,
              │             leases, members, status, compact / defragment / alarms —
              │             plain values, our errors, timeouts
              ▼
    etcd3aio services (KV, Lease, Watch, Cluster, Maintenance), on
    our channel: mutual TLS with the consensus CA, round robin over the endpoints, unary
    calls safe to cancel from anyio (roleserve_core.rpc.CancellationSafeChannel)

Keeping etcd3aio behind this adapter means callers see plain dataclasses and
``EtcdRequestError`` rather than protobufs and a third party's exceptions, and the client
library can be replaced without touching them. Every call has a timeout (the client's
default unless given), so no caller waits forever on an unreachable cluster.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import anyio
import grpc
from etcd3aio import EtcdError, prefix_range_end
from etcd3aio.cluster import ClusterService
from etcd3aio.kv import KVService
from etcd3aio.lease import LeaseService
from etcd3aio.maintenance import AlarmType, MaintenanceService

from roleserve_controlplane.consensus.certificates import ETCD_SERVER_NAME
from roleserve_controlplane.consensus.errors import (
    DatabaseFullError,
    EtcdRequestError,
    RevisionCompactedError,
    WatchCompactedError,
)
from roleserve_controlplane.consensus.etcdproto import LeaseKeepAliveRequest, LeaseStub, WatchStub
from roleserve_controlplane.consensus.watchstream import watch_responses
from roleserve_core import BackoffPolicy
from roleserve_core.identity import Credentials
from roleserve_core.rpc import (
    FLOW_CONTROL_OPTIONS,
    CancellationSafeChannel,
    channel_credentials,
    unary,
)

log = logging.getLogger("roleserve.consensus")

__all__ = [
    "DEFAULT_TIMEOUT",
    "ETCD_RETRY",
    "Alarm",
    "Comparison",
    "EtcdClient",
    "EventKind",
    "KeyValue",
    "Member",
    "MemberStatus",
    "Operation",
    "TransactionResult",
    "WatchEvent",
    "compare_create_revision",
    "compare_mod_revision",
    "compare_value",
    "compare_version",
    "delete_operation",
    "get_operation",
    "put_operation",
]

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0
"""Seconds a request may take, retries included, unless the caller says otherwise."""
ETCD_RETRY = BackoffPolicy(initial=0.05, multiplier=2.0, maximum=1.0, jitter=0.0)
"""The pauses before asking etcd again after an ``EtcdRequestError`` (for ``retry``): from
0.05 s, doubling up to 1 s, since a member that is starting or electing answers soon."""

Comparison = Any
"""An etcd ``Compare`` message; build one with the ``compare_*`` functions."""
Operation = Any
"""An etcd ``RequestOp`` message; build one with the ``*_operation`` functions."""

_OPERATORS = {"=": 0, ">": 1, "<": 2, "!=": 3}  # etcd's Compare.CompareResult


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd stores it."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def _of(cls, kv: Any) -> KeyValue:
        return cls(
            bytes(kv.key),
            bytes(kv.value),
            int(kv.create_revision),
            int(kv.mod_revision),
            int(kv.version),
            int(kv.lease),
        )


class EventKind(enum.Enum):
    """What happened to a key."""

    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change seen by a watch."""

    kind: EventKind
    key: bytes
    value: bytes
    """The new value; empty for a delete."""
    revision: int
    """The revision of the change (the key's mod revision)."""
    create_revision: int


@dataclass(frozen=True, slots=True)
class TransactionResult:
    """The outcome of ``transaction``."""

    succeeded: bool
    """Whether every comparison held (so the success operations ran)."""
    revision: int
    """The store's revision after the transaction."""
    responses: tuple[Any, ...]
    """etcd's responses to the operations that ran."""


@dataclass(frozen=True, slots=True)
class Member:
    """One etcd member as the cluster lists it."""

    id: int
    name: str
    """Empty for a member added but not started yet."""
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_learner: bool

    @classmethod
    def _of(cls, member: Any) -> Member:
        return cls(
            int(member.ID),
            str(member.name),
            tuple(member.peerURLs),
            tuple(member.clientURLs),
            bool(member.isLearner),
        )


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """What one member says about itself."""

    member_id: int
    leader: int
    """The member ID of the raft leader it knows; 0 if none."""
    raft_index: int
    raft_applied_index: int
    raft_term: int
    version: str
    is_learner: bool
    errors: tuple[str, ...]
    cluster_id: int = 0
    """The ID of the cluster the member belongs to (two clusters never share one)."""
    revision: int = 0
    """The store's revision as this member has applied it."""
    db_size: int = 0
    """Bytes of the member's database file (what the backend quota limits)."""
    db_size_in_use: int = 0
    """Bytes of it holding data; the rest is free pages a defragmentation gives back."""
    db_size_quota: int = 0
    """The member's backend quota (``--quota-backend-bytes``); 0 from etcd 3.4, which
    does not say."""

    @property
    def db_free(self) -> int:
        """Bytes of the database file a defragmentation would give back."""
        return max(0, self.db_size - self.db_size_in_use)


@dataclass(frozen=True, slots=True)
class Alarm:
    """An alarm a member raised: ``NOSPACE`` (its database passed the backend quota;
    writes fail until it is cleared) or ``CORRUPT``."""

    member_id: int
    kind: str


def compare_value(key: bytes | str, operator: str, value: bytes | str) -> Comparison:
    """A comparison of ``key``'s value: ``compare_value(k, "=", b"x")``."""
    return KVService.txn_compare_value(key, value, result=_OPERATORS[operator])


def compare_version(key: bytes | str, operator: str, version: int) -> Comparison:
    """A comparison of ``key``'s version (0: the key does not exist)."""
    return KVService.txn_compare_version(key, version, result=_OPERATORS[operator])


def compare_create_revision(key: bytes | str, operator: str, revision: int) -> Comparison:
    """A comparison of ``key``'s create revision (0: the key does not exist)."""
    return KVService.txn_compare_create_revision(key, revision, result=_OPERATORS[operator])


def compare_mod_revision(key: bytes | str, operator: str, revision: int) -> Comparison:
    """A comparison of ``key``'s last modification revision."""
    comparison = KVService.txn_compare_create_revision(key, 0, result=_OPERATORS[operator])
    comparison.target = comparison.MOD
    comparison.mod_revision = revision
    return comparison


def put_operation(key: bytes | str, value: bytes | str, *, lease: int = 0) -> Operation:
    """A put, for ``transaction``."""
    return KVService.txn_op_put(key, value, lease=lease)


def get_operation(key: bytes | str) -> Operation:
    """A get, for ``transaction``."""
    return KVService.txn_op_get(key)


def delete_operation(key: bytes | str) -> Operation:
    """A delete, for ``transaction``."""
    return KVService.txn_op_delete(key)


def _bytes(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


def operation_of(what: str) -> str:
    """The operation a request's description names, without its arguments: the words
    before the first that is not all letters (``"get prefix b'/nodes/'"`` → ``"get
    prefix"``). A bounded set, since the words come from this module's code."""
    return " ".join(itertools.takewhile(str.isalpha, what.split()))


class EtcdClient:
    """A client of one etcd cluster, over mutual TLS.

    :param endpoints: ``host:port`` of the members' client URLs; requests are spread over
        them, and an unreachable one is skipped.
    :param credentials: a key and certificate of the consensus CA, and that CA.
    :param timeout: the default deadline of each request, retries included.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        credentials: Credentials,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        attempts: int = 3,
        observe: Callable[[str, float], None] | None = None,
    ) -> None:
        """:param observe: called with each request's operation (``operation_of``) and
        seconds, failed ones too (the curator's: ``NodeStats.etcd.observe``)."""
        if not endpoints:
            raise ValueError("an etcd client needs at least one endpoint")
        self.endpoints = tuple(endpoints)
        self.timeout = timeout
        self.observe = observe
        channel = grpc.aio.secure_channel(
            "ipv4:" + ",".join(endpoints),
            channel_credentials(credentials),
            options=[
                ("grpc.lb_policy_name", "round_robin"),
                ("grpc.ssl_target_name_override", ETCD_SERVER_NAME),
                ("grpc.keepalive_time_ms", 10_000),
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.keepalive_permit_without_calls", 1),
                # Members go down and come back; grpc's default reconnect backoff (1 s,
                # growing to 120 s) would keep a client away long after one is back.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2000),
                # No bandwidth probes: each is a round trip that wakes etcd too, after
                # every lease keep-alive's answer (see the constant).
                *FLOW_CONTROL_OPTIONS,
            ],
        )
        self.channel = CancellationSafeChannel(channel, wait_for_admission=False)
        self._kv = KVService(self.channel, max_attempts=attempts)
        self._lease = LeaseService(self.channel, max_attempts=attempts)
        self._cluster = ClusterService(self.channel, max_attempts=attempts)
        self._maintenance = MaintenanceService(self.channel, max_attempts=attempts)
        self._watch = WatchStub(self.channel)  # see watchstream
        self.lease_stub = LeaseStub(self.channel)  # see etcdproto

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel; outstanding requests fail."""
        await self.channel.close()

    async def _request(self, what: str, call: Awaitable[T], *, deadline: float | None = None) -> T:
        """Await one request, turning every failure into ``EtcdRequestError``.

        :param deadline: seconds after which to give up on ``call`` here too (for calls
            that carry no deadline of their own, such as streams).
        """
        started = time.perf_counter()
        try:
            with anyio.fail_after(deadline):
                return await call
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise _request_error(f"etcd {what}: {exc}") from exc
        except TimeoutError:
            limit = deadline or self.timeout
            raise EtcdRequestError(f"etcd {what}: no answer within {limit:.2g}s") from None
        finally:
            if self.observe is not None:
                self.observe(operation_of(what), time.perf_counter() - started)

    # -- keys ------------------------------------------------------------------------

    async def get(
        self, key: bytes | str, *, revision: int = 0, timeout: float | None = None
    ) -> KeyValue | None:
        """The key, or None if it does not exist.

        :param revision: read it as it was at this revision (0: now).
        :raises RevisionCompactedError: if ``revision`` was compacted away.
        """
        response = await self._request(
            f"get {key!r}",
            self._kv.get(_bytes(key), revision=revision, timeout=timeout or self.timeout),
        )
        return KeyValue._of(response.kvs[0]) if response.kvs else None

    async def get_prefix(
        self, prefix: bytes | str, *, timeout: float | None = None
    ) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix``, sorted by key, and the revision they were read at."""
        start = _bytes(prefix)
        response = await self._request(
            f"get prefix {prefix!r}",
            self._kv.get(start, prefix_range_end(start), timeout=timeout or self.timeout),
        )
        return [KeyValue._of(kv) for kv in response.kvs], int(response.header.revision)

    async def put(
        self,
        key: bytes | str,
        value: bytes | str,
        *,
        lease: int = 0,
        timeout: float | None = None,
    ) -> int:
        """Store ``value`` at ``key``; returns the new revision."""
        response = await self._request(
            f"put {key!r}",
            self._kv.put(_bytes(key), _bytes(value), lease, timeout=timeout or self.timeout),
        )
        return int(response.header.revision)

    async def delete(self, key: bytes | str, *, timeout: float | None = None) -> bool:
        """Delete ``key``; returns whether it existed."""
        response = await self._request(
            f"delete {key!r}", self._kv.delete(_bytes(key), timeout=timeout or self.timeout)
        )
        return int(response.deleted) > 0

    async def transaction(
        self,
        compare: Sequence[Comparison],
        success: Sequence[Operation],
        failure: Sequence[Operation] = (),
        *,
        timeout: float | None = None,
    ) -> TransactionResult:
        """If every comparison holds, run ``success``, else ``failure``, atomically."""
        response = await self._request(
            "transaction",
            self._kv.txn(
                list(compare), list(success), list(failure), timeout=timeout or self.timeout
            ),
        )
        return TransactionResult(
            bool(response.succeeded), int(response.header.revision), tuple(response.responses)
        )

    async def compact(
        self, revision: int, *, physical: bool = False, timeout: float | None = None
    ) -> None:
        """Discard the history of every key before ``revision``.

        :param physical: wait until the member that serves the request has removed it
            from its database; the others do so on their own, as they apply the compaction
            (``maintenance`` waits for their sizes to settle).
        :raises RevisionCompactedError: if the store was compacted at or past ``revision``.
        """
        await self._request(
            f"compact to revision {revision}",
            self._kv.compact(revision, physical=physical, timeout=timeout or self.timeout),
        )

    async def watch_prefix(
        self, prefix: bytes | str, *, start_revision: int
    ) -> AsyncGenerator[list[WatchEvent], None]:
        """Every change under ``prefix`` from ``start_revision`` on, a batch per response.

        Close it when done (``contextlib.aclosing``), or its stream stays open until the
        generator is collected.

        Typically: ``get_prefix`` for the current keys and revision, then watch from that
        revision + 1. Reconnects by itself after transient errors, resuming where it was.

        :raises WatchCompactedError: if ``start_revision`` was compacted away; read the
            keys again and watch from the new revision.
        """
        start = _bytes(prefix)
        stream = watch_responses(self._watch, start, prefix_range_end(start), start_revision)
        try:
            async for response in stream:
                if response.compact_revision > 0:
                    raise WatchCompactedError(
                        f"etcd watch of {prefix!r} from revision {start_revision}: "
                        f"compacted up to {response.compact_revision}",
                        int(response.compact_revision),
                    )
                if response.events:
                    yield [_event(event) for event in response.events]
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise EtcdRequestError(f"etcd watch of {prefix!r}: {exc}") from exc
        finally:
            await stream.aclose()

    async def mirror_prefix(
        self,
        prefix: str,
        *,
        load: Callable[[Sequence[KeyValue], int], Awaitable[None]],
        apply: Callable[[WatchEvent], None],
    ) -> None:
        """Keep a copy of the keys under ``prefix``, until cancelled: ``load`` gets every key
        and the revision they were read at, then ``apply`` each change after that revision.

        A watch that ends, or falls behind a compaction (the copy missed changes), starts
        over from a new ``load``: the caller's copy is replaced whole, never patched across
        a gap. The node cache and the revoked serials keep their copies this way.
        """
        while True:
            stored, revision = await self.get_prefix(prefix)
            await load(stored, revision)
            watch = self.watch_prefix(prefix, start_revision=revision + 1)
            try:
                async with contextlib.aclosing(watch):
                    async for events in watch:
                        for event in events:
                            apply(event)
            except WatchCompactedError as exc:
                log.warning("watch of %r fell behind a compaction (%s); reloading", prefix, exc)

    # -- leases ----------------------------------------------------------------------

    async def grant_lease(self, ttl: int, *, timeout: float | None = None) -> int:
        """A new lease of ``ttl`` seconds; returns its ID."""
        response = await self._request(
            f"grant lease of {ttl}s", self._lease.grant(ttl, timeout=timeout or self.timeout)
        )
        return int(response.ID)

    async def keep_alive(self, lease: int, *, timeout: float | None = None) -> int:
        """Renew ``lease`` once; returns the seconds it has left (0 or less: expired)."""

        async def renew() -> int:
            stream = self.lease_stub.LeaseKeepAlive(iter([LeaseKeepAliveRequest(ID=lease)]))
            try:
                async for response in stream:
                    return int(response.TTL)
            finally:
                stream.cancel()
            raise EtcdRequestError(f"etcd keepalive of lease {lease:x}: no response")

        # Through unary(): grpc re-raises the deadline's cancellation of its stream as a
        # CancelledError of its own, which escaped fail_after; the election's keep-alive task
        # then ended "cancelled", and its task group swallowed the campaign's cancellation.
        return await self._request(
            f"keepalive of lease {lease:x}", unary(renew()), deadline=timeout or self.timeout
        )

    async def revoke_lease(self, lease: int, *, timeout: float | None = None) -> None:
        """Revoke ``lease``, deleting the keys attached to it."""
        await self._request(
            f"revoke lease {lease:x}", self._lease.revoke(lease, timeout=timeout or self.timeout)
        )

    # -- members ---------------------------------------------------------------------

    async def members(
        self, *, timeout: float | None = None, serializable: bool = False
    ) -> list[Member]:
        """Every member of the cluster, learners included.

        :param serializable: the member's own view, which it gives without a quorum (a
            linearizable list, etcd 3.5's default, waits for one); etcd 3.4 always gives it.
        """
        response = await self._request(
            "member list",
            self._cluster.member_list(
                linearizable=not serializable, timeout=timeout or self.timeout
            ),
        )
        return [Member._of(member) for member in response.members]

    async def add_learner(self, peer_url: str, *, timeout: float | None = None) -> Member:
        """Add a member that will join as a non-voting learner at ``peer_url``."""
        response = await self._request(
            f"add learner {peer_url}",
            self._cluster.member_add([peer_url], is_learner=True, timeout=timeout or self.timeout),
        )
        return Member._of(response.member)

    async def promote(self, member_id: int, *, timeout: float | None = None) -> None:
        """Make the learner ``member_id`` a voting member (it must have caught up)."""
        await self._request(
            f"promote member {member_id:x}",
            self._cluster.member_promote(member_id, timeout=timeout or self.timeout),
        )

    async def remove(self, member_id: int, *, timeout: float | None = None) -> None:
        """Remove member ``member_id``."""
        await self._request(
            f"remove member {member_id:x}",
            self._cluster.member_remove(member_id, timeout=timeout or self.timeout),
        )

    async def status(self, *, timeout: float | None = None) -> MemberStatus:
        """The status of whichever member answers (use a one-endpoint client to choose)."""
        response = await self._request(
            "status", self._maintenance.status(timeout=timeout or self.timeout, max_attempts=1)
        )
        return MemberStatus(
            member_id=int(response.header.member_id),
            leader=int(response.leader),
            raft_index=int(response.raftIndex),
            raft_applied_index=int(response.raftAppliedIndex),
            raft_term=int(response.raftTerm),
            version=str(response.version),
            is_learner=bool(response.isLearner),
            errors=tuple(response.errors),
            cluster_id=int(response.header.cluster_id),
            revision=int(response.header.revision),
            db_size=int(response.dbSize),
            db_size_in_use=int(response.dbSizeInUse),
            db_size_quota=int(getattr(response, "dbSizeQuota", 0)),
        )

    async def move_leader(self, member_id: int, *, timeout: float | None = None) -> None:
        """Hand raft leadership to the voting member ``member_id``; only the leader's own
        member does it (use a one-endpoint client of it)."""
        await self._request(
            f"move leader to {member_id:x}",
            self._maintenance.move_leader(
                member_id, timeout=timeout or self.timeout, max_attempts=1
            ),
        )

    # -- maintenance -----------------------------------------------------------------

    async def defragment(self, *, timeout: float | None = None) -> None:
        """Defragment the database of whichever member answers (use a one-endpoint client
        to choose): it is rewritten without its free pages, and answers nothing meanwhile.
        """
        await self._request(
            "defragment",
            self._maintenance.defragment(timeout=timeout or self.timeout, max_attempts=1),
        )

    async def alarms(self, *, timeout: float | None = None) -> list[Alarm]:
        """Every alarm raised in the cluster."""
        response = await self._request(
            "alarm list", self._maintenance.alarms(timeout=timeout or self.timeout)
        )
        return [
            Alarm(int(alarm.memberID), AlarmType(int(alarm.alarm)).name)
            for alarm in response.alarms
        ]

    async def disarm(self, alarm: Alarm, *, timeout: float | None = None) -> None:
        """Clear ``alarm`` (etcd raises it again if its cause is still there)."""
        await self._request(
            f"clear alarm {alarm.kind} of member {alarm.member_id:x}",
            self._maintenance.alarm_deactivate(
                AlarmType[alarm.kind], member_id=alarm.member_id, timeout=timeout or self.timeout
            ),
        )


def _request_error(message: str) -> EtcdRequestError:
    """The error of a failed request: a compacted revision and a full database get their
    own classes, since their callers act on them (read anew; wait for maintenance)."""
    if "required revision has been compacted" in message:
        return RevisionCompactedError(message)
    if "database space exceeded" in message:
        return DatabaseFullError(
            f"{message} (a member's database passed [plugins.controlplane] "
            "quota_backend_bytes: writes fail until the leading curator's maintenance "
            "compacts, defragments and clears the NOSPACE alarm; `roleserve ctl consensus` "
            "shows it; if it stays, raise the quota)"
        )
    return EtcdRequestError(message)


def _event(event: Any) -> WatchEvent:
    kind = EventKind.DELETE if int(event.type) == 1 else EventKind.PUT
    kv = event.kv
    return WatchEvent(
        kind,
        bytes(kv.key),
        bytes(kv.value),
        int(kv.mod_revision),
        int(kv.create_revision),
    )
