"""Leader election on an etcd lease, after etcd's concurrency package (and Monogon's).

::

    campaign(value):  grant lease (TTL) ─▶ put <prefix>/<lease> (value) ─▶ wait until this
                      key has the lowest create revision under <prefix> ─▶ Leadership
    while waiting
    and leading:      renew the lease every TTL/3; if no renewal is confirmed before the
                      lease could have expired: while leading, leadership is LOST
                      (leadership.lost is set, leadership.cause says why); while waiting,
                      the candidate campaigns again on a new lease (it lost its place)
    on exit:          revoke the lease: the next candidate takes over at once

A leader that cannot reach etcd cannot know whether its lease still holds, so it must
assume the worst once ``TTL`` has passed since the last confirmed renewal: ``lost`` is set
then, and the holder must stop acting as leader. Writes that only a leader may make should
also be fenced: ``Leadership.guard()`` is a comparison that holds only while its key
exists, for ``EtcdClient.transaction``.

On start, a candidate deletes keys left by an earlier run of itself (same value, another
lease), so a restarted node does not wait out its own stale lease.

Who says what: a loss is the holder's to report, since only it knows what it stops doing
(the curator logs one WARNING with ``cause``); this module logs it at DEBUG. A candidate whose
lease lapsed never led, so nothing was lost: a follower resumed after a pause (SIGSTOP, a
suspended machine) used to log an ERROR "leadership lost", and its curator failed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from types import TracebackType

import anyio
from anyio.abc import TaskGroup

from roleserve_controlplane.consensus.client import (
    Comparison,
    EtcdClient,
    EventKind,
    KeyValue,
    compare_create_revision,
    compare_mod_revision,
    delete_operation,
    put_operation,
)
from roleserve_controlplane.consensus.defaults import DEFAULT_TTL
from roleserve_controlplane.consensus.errors import (
    EtcdRequestError,
    LeadershipLostError,
    WatchCompactedError,
)

__all__ = ["DEFAULT_TTL", "Campaign", "Election", "Leader", "Leadership"]

log = logging.getLogger("roleserve.consensus")

RESIGN_TIMEOUT = 2.0
"""Seconds a leader leaving its campaign gives the revoke of its lease."""


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads: the key of its campaign and the value it campaigned with."""

    key: bytes
    value: bytes
    create_revision: int


@dataclass(eq=False)
class Leadership:
    """Held by the winner of a campaign while the ``Campaign`` block lasts."""

    key: bytes
    value: bytes
    lease: int
    create_revision: int
    lost: anyio.Event = field(default_factory=anyio.Event)
    """Set once the lease may have expired: stop acting as leader."""
    cause: str = ""
    """Why ``lost`` was set, for the holder's log line (``lose``)."""

    def lose(self, cause: str) -> None:
        """Set ``lost``, saying why (the first cause stays)."""
        if not self.lost.is_set():
            self.cause = cause
            self.lost.set()

    def guard(self) -> Comparison:
        """A transaction comparison that holds only while this leadership's key exists."""
        return compare_create_revision(self.key, "=", self.create_revision)

    def check(self) -> None:
        """:raises LeadershipLostError: if leadership was lost."""
        if self.lost.is_set():
            raise LeadershipLostError(f"leadership of {self.key.decode()} was lost")


class Election:
    """An election among the candidates campaigning under ``prefix``."""

    def __init__(self, client: EtcdClient, prefix: str, *, ttl: int = DEFAULT_TTL) -> None:
        self.client = client
        self.prefix = prefix.rstrip("/") + "/"
        self.ttl = ttl

    async def candidates(self) -> tuple[list[KeyValue], int]:
        """Every campaign key, leader first, and the revision they were read at."""
        keys, revision = await self.client.get_prefix(self.prefix)
        return sorted(keys, key=lambda kv: kv.create_revision), revision

    async def leader(self) -> Leader | None:
        """The current leader, or None."""
        keys, _ = await self.candidates()
        return Leader(keys[0].key, keys[0].value, keys[0].create_revision) if keys else None

    async def observe(self) -> AsyncGenerator[Leader | None, None]:
        """The current leader, then every change of leader, as it happens.

        Close it when done (``contextlib.aclosing``).
        """
        keys, revision = await self.candidates()
        candidates = {kv.key: (kv.create_revision, kv.value) for kv in keys}
        current = _first(candidates)
        yield current
        watch = self.client.watch_prefix(self.prefix, start_revision=revision + 1)
        async with contextlib.aclosing(watch):
            async for events in watch:
                for event in events:
                    if event.kind is EventKind.DELETE:
                        candidates.pop(event.key, None)
                    else:
                        candidates.setdefault(event.key, (event.create_revision, event.value))
                leader = _first(candidates)
                if leader != current:
                    current = leader
                    yield current

    def campaign(self, value: bytes) -> Campaign:
        """``async with election.campaign(value) as leadership:`` waits to lead, then leads
        until the block ends (or ``leadership.lost`` is set)."""
        return Campaign(self, value)


def _lapse_cause(ttl: int, expired: bool, error: str) -> str:
    """Why a lease was not renewed in time, in words for a log line."""
    if expired:
        return "etcd says its lease expired"
    if error:
        return f"no renewal of its lease confirmed within {ttl} s (the last try: {error})"
    return (
        f"no renewal of its lease confirmed within {ttl} s: this process did not run in time "
        "(paused, or starved of CPU)"
    )


def _first(candidates: dict[bytes, tuple[int, bytes]]) -> Leader | None:
    if not candidates:
        return None
    key, (revision, value) = min(candidates.items(), key=lambda item: item[1][0])
    return Leader(key, value, revision)


class Campaign:
    """The async context manager of ``Election.campaign``."""

    def __init__(self, election: Election, value: bytes) -> None:
        self.election = election
        self.value = value
        self._tasks: TaskGroup | None = None
        self._leadership: Leadership | None = None
        self._won = anyio.Event()
        """Set once the campaign leads: a lapse of its lease is a loss from then on."""

    async def __aenter__(self) -> Leadership:
        while True:
            leadership = await self._campaign_once()
            if leadership is not None:
                log.info("leading %s with key %s", self.election.prefix, leadership.key)
                return leadership

    async def _campaign_once(self) -> Leadership | None:
        """Campaign on a new lease until it leads; None if the lease lapsed meanwhile
        (its keep-alive is stopped then)."""
        election, client = self.election, self.election.client
        confirmed = anyio.current_time()
        lease = await client.grant_lease(election.ttl)
        key = f"{election.prefix}{lease:016x}".encode()
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        try:
            await self._delete_stale_keys(lease)
            result = await client.transaction(
                [compare_create_revision(key, "=", 0)],
                [put_operation(key, self.value, lease=lease)],
            )
            leadership = Leadership(key, self.value, lease, result.revision)
            self._leadership = leadership
            self._tasks.start_soon(self._keep_alive, leadership, confirmed, self._won)
            leads = await self._wait_to_lead(leadership)
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        if not leads:
            log.debug(
                "campaigning again on a new lease: %s",
                leadership.cause or f"the campaign key {key.decode()} is gone",
            )
            await self.__aexit__(None, None, None)
            return None
        self._won.set()
        return leadership

    async def _delete_stale_keys(self, lease: int) -> None:
        keys, _ = await self.election.candidates()
        for stale in keys:
            if stale.value == self.value and stale.lease != lease:
                await self.election.client.transaction(
                    [compare_mod_revision(stale.key, "=", stale.mod_revision)],
                    [delete_operation(stale.key)],
                )
                log.info("deleted a stale campaign key of ours, %s", stale.key.decode())

    async def _wait_to_lead(self, leadership: Leadership) -> bool:
        """Wait until our key is the oldest (True), or our lease lapsed meanwhile (False)."""
        while True:
            if leadership.lost.is_set():
                return False
            keys, revision = await self.election.candidates()
            candidates = [kv.key for kv in keys]
            if leadership.key not in candidates:  # its lease lapsed, and etcd deleted it
                return False
            ours = candidates.index(leadership.key)
            if ours == 0:
                return True
            predecessor = keys[ours - 1].key
            # The gRPC watch runs in a child task and this task waits on an anyio event:
            # gRPC re-raises a cancellation as one of its own, which a task group lets pass
            # from a child (a cancelled child is a cancelled child) but not from its host,
            # where it escaped and ended the whole curator when the lease was lost here.
            async with anyio.create_task_group() as waiting:
                waiting.start_soon(self._until_deleted, predecessor, revision, waiting.cancel_scope)
                await leadership.lost.wait()
                waiting.cancel_scope.cancel()

    async def _until_deleted(self, key: bytes, revision: int, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` once ``key`` is deleted after ``revision``, or once the watch
        fell behind a compaction (the caller reads the candidates again)."""
        watch = self.election.client.watch_prefix(key, start_revision=revision + 1)
        with contextlib.suppress(WatchCompactedError):
            async with contextlib.aclosing(watch):
                async for events in watch:
                    if any(event.kind is EventKind.DELETE and event.key == key for event in events):
                        break
        scope.cancel()

    async def _keep_alive(self, leadership: Leadership, confirmed: float, won: anyio.Event) -> None:
        """Renew the lease every TTL/3; set ``lost`` once a renewal cannot be confirmed
        before the lease could have expired (``won``: whether it leads by then)."""
        ttl = self.election.ttl
        client = self.election.client
        key = leadership.key.decode()
        while True:
            await anyio.sleep(max(0.0, confirmed + ttl / 3 - anyio.current_time()))
            deadline = confirmed + ttl
            renewed, expired, error = False, False, ""
            while not renewed and not expired and anyio.current_time() < deadline:
                sent = anyio.current_time()
                try:
                    left = await client.keep_alive(leadership.lease, timeout=deadline - sent)
                except EtcdRequestError as exc:
                    error = str(exc)
                    level = logging.WARNING if won.is_set() else logging.DEBUG
                    log.log(level, "renewing the lease of %s: %s", key, exc)
                    await anyio.sleep(min(0.1, max(0.0, deadline - anyio.current_time())))
                    continue
                expired = left <= 0
                confirmed, renewed = sent, not expired
            if not renewed:
                cause = _lapse_cause(ttl, expired, error)
                if won.is_set():
                    log.debug("the leadership of %s is lost: %s", key, cause)
                else:  # nothing is lost: the campaign starts again on a new lease
                    log.debug("the campaign lease of %s lapsed before it led: %s", key, cause)
                leadership.lose(cause)
                return

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tasks, self._tasks = self._tasks, None
        if tasks is None:
            return None
        tasks.cancel_scope.cancel()
        try:
            # The block ran inside this task group's cancel scope: its exception must pass
            # through the group's exit, or a cancellation of that scope would escape it.
            return await tasks.__aexit__(exc_type, exc, tb)
        finally:
            leadership, self._leadership = self._leadership, None
            if leadership is not None and not leadership.lost.is_set():
                # Resign at once; if etcd cannot be reached, the lease expires by itself.
                await self._resign(leadership)

    async def _resign(self, leadership: Leadership) -> None:
        """Revoke the lease, so that the next candidate leads at once; if etcd cannot be
        reached within ``RESIGN_TIMEOUT``, the lease expires by itself after its TTL, and a
        WARNING says so (a node that stopped its etcd member first used to lose this
        request without a word, and every clean stop cost the cluster a TTL without leader)."""
        failed = "etcd did not answer in time"
        with anyio.move_on_after(RESIGN_TIMEOUT, shield=True):
            try:
                await self.election.client.revoke_lease(leadership.lease)
            except EtcdRequestError as exc:
                failed = str(exc)
            else:
                log.info("resigned the lead of %s", self.election.prefix)
                return
        log.warning(
            "could not resign the lead of %s (%s): the next leader waits until the lease "
            "expires (%d s)",
            self.election.prefix,
            failed,
            self.election.ttl,
        )
