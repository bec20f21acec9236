"""The client side: channels that verify the server is a node of the cluster.

A client trusts only the cluster CA, and checks the server's certificate against a node ID
(``node_id=``) or, when it does not know which node answers (a seed address), against the
name every node certificate carries, ``ANY_NODE_NAME``. Never against the host name: nodes
are found by address, and their certificates name their IDs.

The channel is a thin wrapper of grpc.aio's, and generated stubs built on it inherit two
fixes: unary responses are awaited through ``unary`` (safe to cancel from anyio), and
request streams are written only once the server admitted the call, so that a refusal
arrives as the server's status, not as INTERNAL (see ``ADMITTED_METADATA`` in ``_admission``).

Every channel pings its server (``KEEPALIVE_OPTIONS``, Monogon's resolver's values: a ping
after 10 s, answered within 5 s, with or without calls): a peer that accepts TCP and never
answers (a stopped process, a paused VM) fails every call and stream on the channel within
about 15 s, where without pings a stream to it would wait forever. The servers permit these
pings (``KEEPALIVE_POLICY`` in ``_server``); a server that does not (etcd's) answers too
frequent pings with GOAWAY, so its clients set their own options. No channel probes the
bandwidth of its connection (``FLOW_CONTROL_OPTIONS``): on an idle node, those probes were
two of the four round trips of each heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Sequence
from typing import Any, cast

import anyio
import grpc

from roleserve_core._public import publish
from roleserve_core.identity import ANY_NODE_NAME, TlsCredentials
from roleserve_core.rpc._admission import ADMITTED_METADATA_KEY
from roleserve_core.rpc._unary import CancellationSafeCall

__all__ = [
    "CHANNEL_OPTIONS",
    "FLOW_CONTROL_OPTIONS",
    "KEEPALIVE_OPTIONS",
    "RECONNECT_OPTIONS",
    "CancellationSafeChannel",
    "channel_credentials",
    "connection_refused",
    "secure_channel",
    "until_ready",
]

_log = logging.getLogger("roleserve.rpc")

KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
"""Ping the server 10 s after the last ping, give up on the connection (failing its calls
as UNAVAILABLE) when the ping is not answered within 5 s; ping with no call open too, and
without a limit on pings between data frames (gRPC stops at 2 by default, which would leave
a quiet stream unwatched)."""


RECONNECT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 5_000),
)
"""Reconnect a quarter second after a refused connection, backing off to at most 5 s
(gRPC's defaults are 1 s and 120 s). A curator restarts its server on the same port when it
changes role; its clients are back within a quarter second, and a channel to a node that is
down for minutes still notices within 5 s that it is up again."""

FLOW_CONTROL_OPTIONS: tuple[tuple[str, int], ...] = (("grpc.http2.bdp_probe", 0),)
"""No bandwidth-delay-product probes, on channels and servers alike (``create_server``).
gRPC's HTTP/2 transport answers data it receives with a PING of its own, to size its
receive window from the round trip; on a node's idle connections the data is the heartbeat
and its reply (5 s apart), so each beat cost two extra round trips, one started by each end,
each waking both ends' gRPC threads. ``benchmarks/grpc_idle.py``, three runs on a busy
machine: the beating client 0.59–0.79× the context switches and 0.59–0.95× the CPU of
gRPC's defaults, the server 0.50–0.77× and 0.59–0.80×; ``benchmarks/scale.py --sizes 10
--kubernetes-workers 3``: a node without roles 0.048 % of a core against 0.069 %. What is
lost is a receive window grown past gRPC's fixed one for bulk transfers over long round
trips: the messages here are small, and 8 MB over loopback took 0.90× the time without
probes (the same benchmark)."""

CHANNEL_OPTIONS = KEEPALIVE_OPTIONS + RECONNECT_OPTIONS + FLOW_CONTROL_OPTIONS
"""What every channel of ``secure_channel`` starts from."""


READY_POLL_INTERVAL = 0.1
"""Seconds between looks at a channel that is not connected (``until_ready``)."""


async def until_ready(channel: grpc.aio.Channel) -> None:
    """Return once ``channel`` is connected to its server, connecting if it is not; bound
    it with ``anyio.move_on_after``.

    Polled rather than awaited with ``channel_ready()``: gRPC cannot cancel that wait, and
    the connectivity watch it leaves behind fires into whatever event loop is current later.
    """
    ready = grpc.ChannelConnectivity.READY
    while channel.get_state(try_to_connect=True) is not ready:  # noqa: ASYNC110 -- see above
        await anyio.sleep(READY_POLL_INTERVAL)


def connection_refused(error: BaseException) -> bool:
    """Whether ``error`` is a call that never reached a server because the connection was
    refused (gRPC reports it as UNAVAILABLE, naming the cause only in its details): nothing
    listened then, which says nothing of the channel now."""
    return (
        isinstance(error, grpc.aio.AioRpcError)
        and error.code() == grpc.StatusCode.UNAVAILABLE
        and "connection refused" in (error.details() or "").lower()
    )


def channel_credentials(credentials: TlsCredentials) -> grpc.ChannelCredentials:
    """TLS for a client presenting ``credentials`` and trusting only their cluster CA.

    :raises ValueError: if the credentials carry no cluster CA to verify servers with.
    """
    if credentials.ca_pem is None:
        raise ValueError("a client needs the cluster CA certificate to verify servers")
    return grpc.ssl_channel_credentials(
        root_certificates=credentials.ca_pem,
        private_key=credentials.key_pem,
        certificate_chain=credentials.certificate_pem,
    )


def secure_channel(
    target: str,
    credentials: TlsCredentials,
    *,
    node_id: str | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> CancellationSafeChannel:
    """A channel to ``target`` (``host:port``) that accepts only a node of the cluster.

    :param node_id: accept only this node; otherwise any node of the cluster.
    :param options: gRPC channel options, added to (and replacing the same names of)
        ``CHANNEL_OPTIONS``.
    """
    name = node_id or ANY_NODE_NAME
    given = {option for option, _ in options}
    defaults = [(option, value) for option, value in CHANNEL_OPTIONS if option not in given]
    channel = grpc.aio.secure_channel(
        target,
        channel_credentials(credentials),
        options=[("grpc.ssl_target_name_override", name), *defaults, *options],
    )
    return CancellationSafeChannel(channel)


class _SafeStreamRequestMultiCallable:
    """Writes the request stream only once the server admitted the call (see
    ``ADMITTED_METADATA``); wraps unary responses like ``_SafeUnaryMultiCallable``."""

    __slots__ = ("_multicallable", "_unary_response")

    def __init__(self, multicallable: Any, *, unary_response: bool) -> None:
        self._multicallable = multicallable
        self._unary_response = unary_response

    def __call__(self, request_iterator: Any = None, **kwargs: Any) -> Any:
        call = self._multicallable(None, **kwargs)  # writer style: we feed the requests
        if request_iterator is not None:
            feeder = asyncio.ensure_future(_feed_when_admitted(call, request_iterator))
            call.add_done_callback(lambda _: feeder.cancel())
        return CancellationSafeCall(call) if self._unary_response else call


async def _feed_when_admitted(call: Any, requests: Any) -> None:
    metadata = await call.initial_metadata()
    if metadata is None or metadata.get(ADMITTED_METADATA_KEY) is None:
        return  # refused (or ended): the call's status says why
    try:
        if isinstance(requests, AsyncIterable):
            async for request in requests:
                await call.write(request)
        else:
            for request in requests:
                await call.write(request)
        await call.done_writing()
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        return  # the call ended while we wrote; its status says why
    except Exception:
        _log.exception("the request iterator of %s raised; cancelling the call", call)
        call.cancel()


class _SafeUnaryMultiCallable:
    __slots__ = ("_multicallable",)

    def __init__(self, multicallable: Any) -> None:
        self._multicallable = multicallable

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return CancellationSafeCall(self._multicallable(*args, **kwargs))


class CancellationSafeChannel(grpc.aio.Channel):
    """A grpc.aio channel whose unary-response calls are safe to cancel from anyio.

    :param wait_for_admission: write request streams only once the server admitted the
        call (see ``ADMITTED_METADATA``). Only roleserve servers announce admission: for
        any other server (etcd), pass False, and request streams are written at once.
    """

    def __init__(self, channel: grpc.aio.Channel, *, wait_for_admission: bool = True) -> None:
        self.channel = channel
        self.wait_for_admission = wait_for_admission

    async def __aenter__(self) -> CancellationSafeChannel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Shielded: a cancelled caller (a connector that stops following) still closes it.
        with anyio.CancelScope(shield=True):
            await self.channel.close()

    async def close(self, grace: float | None = None) -> None:
        await self.channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self.channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self.channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self.channel.channel_ready()

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return cast(Any, _SafeUnaryMultiCallable(self.channel.unary_unary(*args, **kwargs)))

    def stream_unary(self, *args: Any, **kwargs: Any) -> Any:
        multicallable = self.channel.stream_unary(*args, **kwargs)
        if not self.wait_for_admission:
            return cast(Any, _SafeUnaryMultiCallable(multicallable))
        return cast(Any, _SafeStreamRequestMultiCallable(multicallable, unary_response=True))

    def unary_stream(self, *args: Any, **kwargs: Any) -> Any:
        return self.channel.unary_stream(*args, **kwargs)

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        multicallable = self.channel.stream_stream(*args, **kwargs)
        if not self.wait_for_admission:
            return multicallable
        return cast(Any, _SafeStreamRequestMultiCallable(multicallable, unary_response=False))


# Its classes report the package as theirs, however this module is first imported (see
# _public, and the package's docstring).
publish("roleserve_core.rpc", globals(), __all__)
