"""The leader's ``Management`` service for a local cluster's own steps, following the leader.

A cluster that was stopped whole changes leader a few times as its curators come back:
each may lead for a moment on the leases it left in etcd, then step down or restart. A
stub on one channel would fail the first call after such a change, so every call goes
through ``LeaderManagement``::

    call ─▶ channel to the leader (found with find_leader when there is none)
      UNAVAILABLE (nothing listens, it stopped leading, its store did not answer) or
      CANCELLED (it stopped leading during the call, which ended its handler):
          drop that leader, wait a little, find the leader again, call again
      any other answer: the caller's
    until STEP_TIMEOUT, then NoLeaderError (naming the last UNAVAILABLE's details)

A dropped leader's channel is closed once no call is on it: ``cluster up`` makes many
calls at once, and closing a channel cancels every call on it, which grpc.aio raises as
``CancelledError`` in the caller: a task that ends so ends silently, as if cancelled (a
100-node up said "the cluster is up" with node 3's consensus join and four nodes' roles
never made, when one call's refusal closed the channel under the others).

Every call ``cluster up`` makes may be repeated: approving an approved node and assigning
an assigned role change nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import grpc

from roleserve_core.access import ClusterAccess
from roleserve_core.connection import NoLeaderError, find_leader
from roleserve_core.proto import management_pb2_grpc
from roleserve_core.rpc import secure_channel

__all__ = ["LeaderManagement"]

RETRIED_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
"""Answers that mean "this curator no longer leads", not "this request is wrong"."""

RETRY_AFTER = 0.25
"""Seconds between a call that found no leader and the next attempt."""


class LeaderManagement:
    """``Management`` on whichever curator leads: ``await management.ApproveNode(request)``
    for a unary method, ``await management.stream("GetNodes", request)`` for the whole
    answer of a streaming one. Close it with ``aclose``.

    :param patience: seconds one call may spend finding a leader that answers.
    """

    def __init__(self, access: ClusterAccess, patience: float) -> None:
        self.access = access
        self.patience = patience
        self._leader_now: _Leader | None = None
        self._dropped: list[_Leader] = []
        """Leaders dropped while calls were still on their channels: closed by the last."""
        self._finding = anyio.Lock()
        """Held while the leader is sought: calls made at once (``cluster up`` sets many
        nodes' roles together) share the one channel found, not one each."""

    def __getattr__(self, method: str) -> Callable[[Any], Awaitable[Any]]:
        if not method[:1].isupper():
            raise AttributeError(method)
        return functools.partial(self.unary, method)

    async def unary(self, method: str, request: Any) -> Any:
        """``method(request)`` on the leader (see the module docstring)."""

        async def call(stub: Any) -> Any:
            return await getattr(stub, method)(request)

        return await self._on_leader(call)

    async def stream(self, method: str, request: Any) -> list[Any]:
        """Every response of the streaming ``method(request)``, read whole on one leader."""

        async def call(stub: Any) -> list[Any]:
            return [response async for response in getattr(stub, method)(request)]

        result: list[Any] = await self._on_leader(call)
        return result

    async def aclose(self) -> None:
        """Close every channel it opened (calls still on them are cancelled)."""
        leaders = [*self._dropped, *([self._leader_now] if self._leader_now else [])]
        self._leader_now, self._dropped = None, []
        for leader in leaders:
            await leader.channel.close()

    async def _on_leader(self, call: Callable[[Any], Awaitable[Any]]) -> Any:
        last: grpc.aio.AioRpcError | None = None
        with anyio.move_on_after(self.patience):
            while True:
                leader = await self._leader()
                leader.calls += 1
                try:
                    return await call(leader.stub)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in RETRIED_CODES:
                        raise
                    last = exc
                    self._drop(leader)
                finally:
                    leader.calls -= 1
                    await self._close_if_unused(leader)
                await anyio.sleep(RETRY_AFTER)
        if last is None:  # the deadline came while the first leader was still sought
            raise NoLeaderError(
                f"no curator at {', '.join(self.access.endpoints)} named a leader that "
                f"answered within {self.patience:g} s"
            )
        # Only RETRIED_CODES are retried (see above): the leaders found all stopped leading or
        # answering; said as no leader, so that ``cluster up`` says it in one line.
        raise NoLeaderError(
            f"no leader answered within {self.patience:g} s (the last: {last.details()})"
        ) from last

    def _drop(self, leader: _Leader) -> None:
        """The next call finds the leader again (unless another call dropped ``leader``
        already, and its successor is in use)."""
        if self._leader_now is leader:
            self._leader_now = None
            self._dropped.append(leader)

    async def _close_if_unused(self, leader: _Leader) -> None:
        if leader.calls == 0 and leader in self._dropped:
            self._dropped.remove(leader)
            with anyio.CancelScope(shield=True):
                await leader.channel.close()

    async def _leader(self) -> _Leader:
        async with self._finding:
            if self._leader_now is None:
                access = self.access
                found = await find_leader(
                    access.endpoints, access.credentials, timeout=self.patience
                )
                channel = secure_channel(found.endpoint, access.credentials, node_id=found.node_id)
                self._leader_now = _Leader(channel, management_pb2_grpc.ManagementStub(channel))
            return self._leader_now


@dataclass(eq=False)
class _Leader:
    """A channel to a leader, with the calls on it now."""

    channel: grpc.aio.Channel
    stub: Any
    calls: int = 0
