"""Encryption of a server's writes off the event loop (gRPC's experiment
``secure_endpoint_offload_large_writes``).

A grpc.aio server encrypts and writes each message in the thread that sends it, the event
loop's: one change sent to 10,000 Watch streams at a leading curator was 10,000 TLS
records sealed and 10,000 ``sendmsg`` calls on the loop (a third of its time in
``sendmsg`` alone, by a native profile), while heartbeats and the next change waited. With
the experiment on, a secure endpoint hands a write longer than its threshold to one of gRPC
core's EventEngine threads, which encrypt and write it without the GIL while the loop goes
on; the sender's write completes once the endpoint has taken the bytes, and writes stay in
order (an endpoint has one write in flight). Measured (``benchmarks/curator_load.py``, 10,000
nodes): a status change reached every watcher in 1.41–1.81 s instead of 1.94–2.36 s, at
the cost of more CPU in all (a write handed to another thread; docs/curator.md, "Measured").

Two parts, because gRPC reads its experiments once, when its core starts:

- ``enable_encryption_offload``: ``GRPC_EXPERIMENTS`` in the environment, set before grpc
  loads (``roleserve node`` does, in ``cli``); the operator's own mention of the experiment
  (``name`` or ``-name``, gRPC's way to turn one off) wins. Set after grpc loaded, it
  changes nothing (gRPC has read its experiments). With it on, every secure
  endpoint of the process offloads writes past gRPC's default threshold (32 KiB: snapshots);
- ``ENCRYPTION_OFFLOAD_OPTIONS``: the server option that offloads every write of the
  servers given it (the curator's, which fans out). Without the experiment it does nothing.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

__all__ = [
    "ENCRYPTION_OFFLOAD_EXPERIMENT",
    "ENCRYPTION_OFFLOAD_OPTIONS",
    "GRPC_EXPERIMENTS_ENV",
    "enable_encryption_offload",
]

GRPC_EXPERIMENTS_ENV = "GRPC_EXPERIMENTS"
"""gRPC's own: experiments to turn on (a name) or off (``-`` and a name), comma-separated."""
ENCRYPTION_OFFLOAD_EXPERIMENT = "secure_endpoint_offload_large_writes"
ENCRYPTION_OFFLOAD_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.secure_endpoint.encryption_offload_threshold", 1),
)
"""Offload every write of the server (gRPC offloads a write longer than the threshold, at
least 1 byte). Every write, heartbeats' answers too: a threshold of 64 bytes, which kept
them on the loop, did worse at 10,000 nodes in one run (a status to every watcher in
2.09 s, heartbeat p99 95 ms)."""


def enable_encryption_offload(environ: MutableMapping[str, str] | None = None) -> None:
    """Turn the experiment on in ``environ`` (the process's own by default), for a process
    whose grpc has not loaded yet; unless the operator's ``GRPC_EXPERIMENTS`` names it.

    Read as gRPC reads it: comma-separated names, each exactly (no spaces trimmed, case
    kept), ``-`` before one to turn it off. The operator's entries are kept as written.
    The child processes a node starts inherit the variable: a plugin's program on Python's
    gRPC offloads its writes over 32 KiB too."""
    environ = os.environ if environ is None else environ
    current = environ.get(GRPC_EXPERIMENTS_ENV, "")
    entries = current.split(",")
    if ENCRYPTION_OFFLOAD_EXPERIMENT in entries or f"-{ENCRYPTION_OFFLOAD_EXPERIMENT}" in entries:
        return
    kept = current.rstrip(",")
    environ[GRPC_EXPERIMENTS_ENV] = (
        f"{kept},{ENCRYPTION_OFFLOAD_EXPERIMENT}" if kept else ENCRYPTION_OFFLOAD_EXPERIMENT
    )
