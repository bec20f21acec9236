"""etcd's Watch stream, resumed after transient errors, whose request stream ends with it.

::

    watch_responses(stub, key, range_end, start_revision)
    └── loop: one Watch call, its create request sent from ``_requests``
          ├── responses ──▶ yielded; the revision to resume from follows them
          ├── UNAVAILABLE, DEADLINE_EXCEEDED ──▶ after a backoff (0.1 s, doubling to 2 s),
          │                                     a new call from that revision
          ├── any other error ──▶ raised (``EtcdClient.watch_prefix`` names it)
          └── ended, however ──▶ ``_requests`` ends too, then the call is cancelled

Why not etcd3aio's ``WatchService.watch``, which does the same: it sends the create request
from an async generator that then awaits a future nobody completes, and grpc.aio consumes a
request iterator in a task of its own, which it cancels only when the call is cancelled
while still running. A call the server ended (its member stopped, or removed) is done, so
that task stayed pending for good: one leaked task per ended watch, and, once collected,
its generator's finaliser failed a test with "aclose(): asynchronous generator is already
running". Here the request generator waits for an event the watch sets when it ends.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

import anyio
import grpc
from etcd3aio.base import TRANSIENT_CODES

from roleserve_controlplane.consensus.etcdproto import (
    WatchCreateRequest,
    WatchRequest,
    WatchResponse,
    WatchStub,
)
from roleserve_core import BackoffPolicy, Retry

__all__ = ["watch_responses"]

log = logging.getLogger("roleserve.consensus")  # the node formats and files it

RECONNECTS = BackoffPolicy(initial=0.1, multiplier=2.0, maximum=2.0, jitter=0.0)
"""The pauses before a new call after a transient error: 0.1 s, doubling up to 2 s (members
come back within seconds)."""


async def watch_responses(
    stub: WatchStub, key: bytes, range_end: bytes, start_revision: int
) -> AsyncGenerator[WatchResponse, None]:
    """Every response of a watch of ``key`` to ``range_end`` from ``start_revision``,
    across new calls after transient errors (see the module docstring).

    :raises grpc.aio.AioRpcError: for an error a new call would not cure.
    """
    revision = start_revision
    pauses = Retry(RECONNECTS)
    while True:
        ended = anyio.Event()
        create = WatchCreateRequest(key=key, range_end=range_end, start_revision=revision)
        call = stub.Watch(_requests(create, ended))
        try:
            async for response in call:
                revision = _resume_from(response, revision)
                pauses.reset()
                yield response
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in TRANSIENT_CODES:  # what etcd3aio retries its requests on
                raise
            log.warning("etcd watch of %r: %s; again in %.1fs", key, exc.code().name, pauses.delay)
        finally:
            ended.set()
            call.cancel()
        await pauses.wait()


def _resume_from(response: WatchResponse, revision: int) -> int:
    """The revision a new call starts from after ``response``."""
    if response.compact_revision > 0:
        return int(response.compact_revision) + 1
    if response.header.revision > 0:
        return int(response.header.revision) + 1
    return revision


async def _requests(
    create: WatchCreateRequest, ended: anyio.Event
) -> AsyncGenerator[WatchRequest, None]:
    """The call's requests: ``create``, then none until the watch ended (a request stream
    that ends early would half-close the call)."""
    yield WatchRequest(create_request=create)
    await ended.wait()
