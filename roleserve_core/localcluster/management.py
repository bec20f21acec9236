"""The leader's ``Management`` service for a local cluster's own steps, following the leader.

A cluster that was stopped whole changes leader a few times as its curators come back:
each may lead for a moment on the leases it left in etcd, then step down or restart. A
stub on one channel would fail the first call after such a change, so every call goes
through ``LeaderManagement``::

    call ─▶ channel to the leader (found with find_leader when there is none)
      UNAVAILABLE (nothing listens, it stopped leading, its store did not answer) or
      CANCELLED (it stopped leading during the call, which ended its handler):
          close the channel, wait a little, find the leader again, call again
      any other answer: the caller's
    until STEP_TIMEOUT, then NoLeaderError (naming the last UNAVAILABLE's details)

Every call ``cluster up`` makes may be repeated: approving an approved node and assigning
an assigned role change nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
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
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
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
        """Close the channel to the leader, if one is open."""
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    async def _on_leader(self, call: Callable[[Any], Awaitable[Any]]) -> Any:
        last: grpc.aio.AioRpcError | None = None
        with anyio.move_on_after(self.patience):
            while True:
                try:
                    return await call(await self._leader())
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in RETRIED_CODES:
                        raise
                    last = exc
                await self.aclose()
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

    async def _leader(self) -> Any:
        async with self._finding:
            if self._stub is None:
                access = self.access
                leader = await find_leader(
                    access.endpoints, access.credentials, timeout=self.patience
                )
                channel = secure_channel(
                    leader.endpoint, access.credentials, node_id=leader.node_id
                )
                self._channel = channel
                self._stub = management_pb2_grpc.ManagementStub(channel)
            return self._stub
