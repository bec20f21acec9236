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
                                                      program is restarted, never HEALTHY)

    wait_answering(health)                            until probe(health) == 200, whoever
                                                      serves it (another runnable's program:
                                                      the controller-manager waits for the
                                                      local apiserver)

    probe_failure(health)                             why it is not ready, in a few words
                                                      (``ctl kubeconfig``'s refusal)

Why not aiohttp: the plugin depends on the core alone, and one request with a status line
to read needs no HTTP client. Every failure to connect, to shake hands or to answer in time
is simply "not ready yet"; the program's own exit is what ends the wait with an error.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable

import anyio
import anyio.abc

from roleserve_core import RunningProgram, endpoint
from roleserve_kubernetes.errors import ComponentNotReadyError
from roleserve_kubernetes.plans import Health

__all__ = [
    "PROBE_TIMEOUT",
    "READY_POLL",
    "READY_RECHECK",
    "UNREADY_LIMIT",
    "follow_readiness",
    "probe",
    "probe_failure",
    "wait_answering",
    "wait_ready",
]

PROBE_TIMEOUT = 5.0
"""Seconds one probe may take (connect, handshake, answer): a real component on the
node's own address answers in milliseconds."""

READY_POLL = 0.2
"""Seconds between two probes while a component starts (kube-apiserver takes seconds)."""

READY_RECHECK = 2.0
"""Seconds between two probes of a component that was ready: how long a status may go on
saying ready after the component stopped being so."""

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
    request = (
        f"GET {health.path} HTTP/1.1\r\nHost: {endpoint(health.host, health.port)}\r\n"
        "Connection: close\r\nAccept: text/plain\r\n\r\n"
    ).encode()
    try:
        with anyio.fail_after(PROBE_TIMEOUT):
            status = await _status(health, request)
    except TimeoutError:
        return f"no answer within {PROBE_TIMEOUT:g} s"
    except ssl.SSLError as exc:  # before OSError: it is one
        return f"TLS: {getattr(exc, 'verify_message', None) or exc.reason or exc}"
    except OSError as exc:
        return _os_reason(exc)
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return "the connection closed without an answer"
    if status is None:
        return "the answer is not HTTP"
    return None if status == 200 else f"{health.path} answered {status}"


def _os_reason(exc: OSError) -> str:
    """``connection refused`` rather than anyio's "All connection attempts failed"."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    return (os.strerror(cause.errno) if cause.errno else str(cause)).lower()


async def _status(health: Health, request: bytes) -> int | None:
    """The HTTP status of the answer to ``request``; None if the answer is not HTTP."""
    stream: anyio.abc.ByteStream
    if health.tls:
        stream = await anyio.connect_tcp(
            health.host,
            health.port,
            ssl_context=_client_context(health.ca_pem),
            tls_hostname=health.host,
            tls_standard_compatible=False,
        )
    else:
        stream = await anyio.connect_tcp(health.host, health.port)
    async with stream:
        await stream.send(request)
        answer = b""
        while b"\r\n" not in answer and len(answer) < 4096:
            answer += await stream.receive()
    parts = answer.split(b"\r\n", 1)[0].split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None
    return int(parts[1])


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
    interval: float = READY_RECHECK,
    limit: float | None = None,
    note: Callable[[str], None] | None = None,
) -> None:
    """Probe a component that answered ready every ``interval`` seconds, and tell
    ``on_ready`` each time the answer changes (never returns; cancel it).

    :param note: told why it is not ready (``probe_failure``) at each probe that fails,
        and ``""`` when it is ready again.
    :raises ComponentNotReadyError: once it has not been ready for ``limit`` seconds
        (default ``UNREADY_LIMIT``) in a row, naming the component's address and the last
        reason.
    """
    ready, since = True, 0.0
    while True:
        await anyio.sleep(interval)
        failure = await probe_failure(health)
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
