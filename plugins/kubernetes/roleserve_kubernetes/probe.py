"""Is a kube component ready? One ``GET /readyz`` (or ``/healthz``) against the program
the runner started.

::

    wait_ready(program, health)
        └─ until: program.listens_on(health.bind)     the address is held by *this* pid
                  and probe(health) == 200            the component says it is ready
           (every READY_POLL seconds; the runnable's block is cancelled if the program exits)

    follow_readiness(health, on_ready)                once ready: probe every READY_RECHECK
                                                      seconds, tell each change (an apiserver
                                                      that loses etcd answers /readyz 500);
                                                      not ready for UNREADY_LIMIT seconds in
                                                      a row: ComponentNotReadyError (a hung
                                                      program is restarted, never HEALTHY);
                                                      over one kept-alive connection (KeptProbe)

    wait_answering(health)                            until probe(health) == 200, whoever
                                                      serves it (another runnable's program:
                                                      the controller-manager waits for the
                                                      local apiserver)

    probe_failure(health)                             why it is not ready, in a few words
                                                      (``ctl kubeconfig``'s refusal)

Why not aiohttp: the plugin depends on the core alone, and one request with a status line
to read needs no HTTP client. Every failure to connect, to shake hands or to answer in time
is simply "not ready yet"; the program's own exit is what ends the wait with an error.

Why ``KeptProbe``: a new TLS handshake at every recheck cost about 2.8 ms of the node's CPU
(and as much of the component's), three components on a controller every two seconds: a
third of the node's idle CPU. On one kept-alive connection a recheck costs about 0.25 ms
and asks the component just the same; a connection the component closed (its idle timeout,
a restart) is replaced at once, so only a fresh connection's failure counts.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from roleserve_core import RunningProgram, endpoint
from roleserve_kubernetes.errors import ComponentNotReadyError
from roleserve_kubernetes.plans import Health

__all__ = [
    "HEAD_LIMIT",
    "PROBE_TIMEOUT",
    "READY_POLL",
    "READY_RECHECK",
    "UNREADY_LIMIT",
    "KeptProbe",
    "follow_readiness",
    "probe",
    "probe_failure",
    "wait_answering",
    "wait_ready",
]

HEAD_LIMIT = 8192
"""Bytes of an answer's status line and headers a kept probe reads before it gives up on
keeping the connection."""

PROBE_TIMEOUT = 5.0
"""Seconds one probe may take (connect, handshake, answer): a real component on the
node's own address answers in milliseconds."""

READY_POLL = 0.2
"""Seconds between two probes while a component starts (kube-apiserver takes seconds)."""

READY_RECHECK = 5.0
"""Seconds between two probes of a component that was ready: how long a status may go on
saying ready after the component stopped being so. Five, not two: a controller probes four
components, and each apiserver's ``/readyz`` asks etcd in turn, all of it on every idle
node of a local cluster; nothing waits on the status for less (``UNREADY_LIMIT``, the
restart of a hung program, is 30 s), and the components keep an idle connection open for
90 s (the kubelet's for good), so the kept connection outlives the longer pause."""

UNREADY_LIMIT = 30.0
"""Seconds a component that was ready may go on not answering ready before its runnable
fails (and the supervisor starts it again after the backoff), as a liveness probe would:
long enough for an apiserver to ride out an etcd election, short enough that a hung
program does not stay HEALTHY."""


async def probe(health: Health) -> bool:
    """Whether ``GET <path>`` on ``health``'s address answers 200 within ``PROBE_TIMEOUT``.

    Over TLS, the server's certificate is verified against ``health.ca_pem`` with the
    host as its IP address, or accepted as it is if there is no CA (a self-signed one).
    """
    return await probe_failure(health) is None


async def probe_failure(health: Health) -> str | None:
    """Why ``GET <path>`` on ``health``'s address does not answer 200 within
    ``PROBE_TIMEOUT`` (``connection refused``, ``/readyz answered 500``...); None if it does.
    """

    async def once() -> int | None:
        async with await _connect(health) as stream:
            return await _status(stream, _request(health, keep=False))

    return await _judged(health, once)


async def _judged(health: Health, ask: Callable[[], Awaitable[int | None]]) -> str | None:
    """What ``ask`` (one request, to its HTTP status) says of ``health``: None if ready."""
    try:
        with anyio.fail_after(PROBE_TIMEOUT):
            status = await ask()
    except TimeoutError:
        return f"no answer within {PROBE_TIMEOUT:g} s"
    except ssl.SSLError as exc:  # before OSError: it is one
        return f"TLS: {getattr(exc, 'verify_message', None) or exc.reason or exc}"
    except OSError as exc:
        return _os_reason(exc)
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return "the connection closed without an answer"
    return _verdict(health, status)


def _verdict(health: Health, status: int | None) -> str | None:
    if status is None:
        return "the answer is not HTTP"
    return None if status == 200 else f"{health.path} answered {status}"


def _request(health: Health, *, keep: bool) -> bytes:
    connection = "keep-alive" if keep else "close"
    return (
        f"GET {health.path} HTTP/1.1\r\nHost: {endpoint(health.host, health.port)}\r\n"
        f"Connection: {connection}\r\nAccept: text/plain\r\n\r\n"
    ).encode()


class KeptProbe:
    """Probes of one component over one kept-alive connection (the module docstring): each
    ``failure()`` is one ``GET``, as ``probe_failure`` does. Close it with ``aclose``."""

    def __init__(self, health: Health) -> None:
        self.health = health
        self._request = _request(health, keep=True)
        self._stream: anyio.abc.ByteStream | None = None
        self.connections = 0
        """Connections opened so far: one while the component keeps it."""

    async def failure(self) -> str | None:
        """Why the component is not ready now; None if it is."""
        if self._stream is not None:
            try:
                with anyio.fail_after(PROBE_TIMEOUT):
                    status = await self._ask(self._stream)
            except TimeoutError:
                return f"no answer within {PROBE_TIMEOUT:g} s"  # hung: no second wait
            except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
                pass  # closed while idle: ask on a new connection
            else:
                return _verdict(self.health, status)
        return await _judged(self.health, self._fresh)

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await anyio.aclose_forcefully(stream)

    async def _fresh(self) -> int | None:
        stream = await _connect(self.health)
        self.connections += 1
        self._stream = stream
        return await self._ask(stream)

    async def _ask(self, stream: anyio.abc.ByteStream) -> int | None:
        """One exchange on ``stream``; the connection is dropped unless it can carry the
        next one (an answer of known length, not ``Connection: close``)."""
        try:
            status, reusable = await _exchange(stream, self._request)
        except BaseException:
            await self.aclose()
            raise
        if not reusable:
            await self.aclose()
        return status


async def _exchange(stream: anyio.abc.ByteStream, request: bytes) -> tuple[int | None, bool]:
    """Send ``request``; the answer's HTTP status (None if not HTTP), and whether the whole
    answer was read so that the connection may carry another request."""
    await stream.send(request)
    answer = b""
    while b"\r\n\r\n" not in answer:
        if len(answer) > HEAD_LIMIT:
            return _status_of(answer), False
        answer += await stream.receive()
    head, _, body = answer.partition(b"\r\n\r\n")
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    length = headers.get(b"content-length", b"")
    if not length.isdigit() or headers.get(b"connection") == b"close":
        return _status_of(head), False
    remaining = int(length) - len(body)
    while remaining > 0:
        remaining -= len(await stream.receive())
    return _status_of(head), remaining == 0


def _status_of(answer: bytes) -> int | None:
    parts = answer.split(b"\r\n", 1)[0].split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None
    return int(parts[1])


def _os_reason(exc: OSError) -> str:
    """``connection refused`` rather than anyio's "All connection attempts failed"."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    return (os.strerror(cause.errno) if cause.errno else str(cause)).lower()


async def _connect(health: Health) -> anyio.abc.ByteStream:
    if health.tls:
        return await anyio.connect_tcp(
            health.host,
            health.port,
            ssl_context=_client_context(health.ca_pem),
            tls_hostname=health.host,
            tls_standard_compatible=False,
        )
    return await anyio.connect_tcp(health.host, health.port)


async def _status(stream: anyio.abc.ByteStream, request: bytes) -> int | None:
    """The HTTP status of the answer to ``request``; None if the answer is not HTTP."""
    await stream.send(request)
    answer = b""
    while b"\r\n" not in answer and len(answer) < 4096:
        answer += await stream.receive()
    return _status_of(answer)


def _client_context(ca_pem: bytes | None) -> ssl.SSLContext:
    if ca_pem is not None:
        return ssl.create_default_context(cadata=ca_pem.decode())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # a controller's self-signed certificate; the pid is checked
    context.verify_mode = ssl.CERT_NONE
    return context


async def wait_ready(program: RunningProgram, health: Health) -> None:
    """Return once ``program`` itself holds ``health``'s address and answers 200 there."""
    # Nothing announces readiness: asking again is the way, as kubeadm's checks do.
    while not (program.listens_on(health.bind) and await probe(health)):  # noqa: ASYNC110
        await anyio.sleep(READY_POLL)


async def wait_answering(health: Health) -> None:
    """Return once ``GET <path>`` on ``health``'s address answers 200, whoever serves it."""
    while not await probe(health):  # noqa: ASYNC110 (nothing announces readiness)
        await anyio.sleep(READY_POLL)


async def follow_readiness(
    health: Health,
    on_ready: Callable[[bool], None],
    interval: float | None = None,
    limit: float | None = None,
    note: Callable[[str], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> None:
    """Probe a component that answered ready every ``interval`` seconds (default
    ``READY_RECHECK``), and tell ``on_ready`` each time the answer changes (never returns;
    cancel it).

    :param note: told why it is not ready (``probe_failure``) at each probe that fails,
        and ``""`` when it is ready again.
    :param sleep: how it waits between probes (a test records the pauses).
    :raises ComponentNotReadyError: once it has not been ready for ``limit`` seconds
        (default ``UNREADY_LIMIT``) in a row, naming the component's address and the last
        reason.
    """
    kept = KeptProbe(health)
    every = READY_RECHECK if interval is None else interval  # read now: tests shorten it
    try:
        await _follow(kept, on_ready, every, limit, note, sleep)
    finally:
        await kept.aclose()


async def _follow(
    kept: KeptProbe,
    on_ready: Callable[[bool], None],
    interval: float,
    limit: float | None,
    note: Callable[[str], None] | None,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    health = kept.health
    ready, since = True, 0.0
    while True:
        await sleep(interval)
        failure = await kept.failure()
        now = failure is None
        if now != ready:
            ready, since = now, anyio.current_time()
            on_ready(now)
        if note is not None:
            note("" if failure is None else failure)
        allowed = UNREADY_LIMIT if limit is None else limit  # read now: tests shorten it
        if failure is not None and anyio.current_time() - since >= allowed:
            raise ComponentNotReadyError(
                f"{endpoint(health.host, health.port)}{health.path} has not answered ready "
                f"for {allowed:g} s ({failure}): stopping it to start it again"
            )
