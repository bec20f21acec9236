"""The liveness probe of a running etcd member: is the process that runs still answering?

::

    every interval: status request, deadline timeout
        answered ──▶ note cleared (if it was set), count back to 0
        no answer ──▶ note "etcd not answering since HH:MM:SS UTC (n of N probes failed)"
        N in a row ──▶ EtcdNotAnsweringError: the member's runnable fails, the supervisor
                       restarts it (etcd is stopped: SIGTERM, then SIGKILL after the grace)

A process that exits is noticed by the runner at once; this is for the one that runs and
does not answer: stopped (SIGSTOP, a paused VM), or stuck on a stalled disk. Only the
request's own failure counts: an etcd that answers without a leader (lost quorum) is alive,
and restarting it would not help.

The probe runs on real time, not the supervisor's clock: it measures a real process, whose
answers take real time (a test's fake clock would stop the probe, not etcd).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NoReturn

import anyio

from roleserve_controlplane.consensus.client import EtcdClient
from roleserve_controlplane.consensus.errors import EtcdNotAnsweringError, EtcdRequestError
from roleserve_core import RunContext

__all__ = [
    "LIVENESS_FAILURES",
    "LIVENESS_INTERVAL",
    "LIVENESS_TIMEOUT",
    "Liveness",
    "probe_forever",
]

LIVENESS_INTERVAL = 10.0
"""Seconds between two probes of a running member."""

LIVENESS_TIMEOUT = 5.0
"""Seconds a probe waits for etcd's answer."""

LIVENESS_FAILURES = 3
"""Probes failed in a row after which etcd is restarted: about 30 s without an answer, far
beyond a slow disk's fsync or a busy host's pause, well within an operator's patience."""


@dataclass(frozen=True, slots=True)
class Liveness:
    """How a member probes its running etcd (defaults: the module's constants)."""

    interval: float = LIVENESS_INTERVAL
    """Seconds between two probes."""
    timeout: float = LIVENESS_TIMEOUT
    """Seconds a probe waits for the answer."""
    failures: int = LIVENESS_FAILURES
    """Probes failed in a row that end the run (at least 1)."""


async def probe_forever(
    ctx: RunContext, client: EtcdClient, policy: Liveness, pid: int
) -> NoReturn:
    """Probe etcd (process ``pid``) through ``client`` until it fails ``policy.failures``
    times in a row; say so in the runnable's note meanwhile.

    :raises EtcdNotAnsweringError: once the bound is reached.
    """
    failed, since = 0, 0.0
    while True:
        await anyio.sleep(policy.interval)
        asked = time.time()
        try:
            await client.status(timeout=policy.timeout)
        except EtcdRequestError:
            failed, since = failed + 1, since or asked
            if failed >= policy.failures:
                raise EtcdNotAnsweringError(
                    f"etcd (pid {pid}) {_silence(since, failed, policy)}; restarting it"
                ) from None
            ctx.set_note(f"etcd (pid {pid}) {_silence(since, failed, policy)}")
            continue
        if failed:
            ctx.log.warning("etcd (pid %d) answers again after %d failed probes", pid, failed)
            ctx.set_note("")
            failed, since = 0, 0.0


def _silence(since: float, failed: int, policy: Liveness) -> str:
    """``not answering since 13:02:11 UTC (2 of 3 probes failed)``."""
    clock = time.strftime("%H:%M:%S", time.gmtime(since))
    return f"not answering since {clock} UTC ({failed} of {policy.failures} probes failed)"
