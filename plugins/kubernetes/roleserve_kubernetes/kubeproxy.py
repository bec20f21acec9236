"""kube-proxy on a worker: Services (ClusterIP, NodePort) programmed in nftables, one proxy
per network namespace.

::

    the kubelet worker, once the curator issued its certificates (kube-proxy's among them:
    CN system:kube-proxy, bound by Kubernetes to system:node-proxier)
        └─ child kube_proxy ──▶ the network namespace's lock
                                 (<runtime root>/kube-proxy.net-<netns inode>.lock, flock)
             held by another ──▶ NEW (not running: never HEALTHY), noted "standby: node
                                 N (D) runs kube-proxy in this network namespace", and
                                 "for another cluster" when N's Kubernetes CA is not
                                 this one's; asked again every LOCK_RETRY seconds
             taken ──▶ kube-proxy (plans.kube_proxy_plan), HEALTHY once /healthz answers
             stopped ──▶ kube-proxy gone, its tables deleted (nft), then the lock let go

Why a lock: kube-proxy's nftables tables have fixed names (``ip kube-proxy``, ``ip6
kube-proxy``), so two proxies in one network namespace would overwrite each other's
rules. The nodes of a ``--netns`` cluster each have a namespace of their own, so each runs
its proxy; the nodes of a loopback cluster share the host's, so exactly one does, and
another takes over as soon as that one stops, or its node dies: the kernel lets a dead
process's lock go at once (no lease to expire), and the node's programs die with it
(``PR_SET_PDEATHSIG``), so the next proxy never meets a live one. The lock file holds its
holder's node ID, data directory and cluster (a digest of its Kubernetes CA), which the
standby's note shows (``ctl tree``).

The tables are deleted while the lock is still held, so a proxy that takes over never has
its fresh rules deleted by the one that left.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO

import anyio

from roleserve_core import RunContext, Runnable
from roleserve_kubernetes.binaries import KUBE_PROXY
from roleserve_kubernetes.component import component_runnable
from roleserve_kubernetes.plans import ProxyInputs, kube_proxy_plan, with_sbin

__all__ = [
    "LOCK_RETRY",
    "TABLES",
    "Holder",
    "cluster_digest",
    "delete_tables",
    "hold_lock",
    "kube_proxy_runnable",
    "netns_lock_path",
]

LOCK_RETRY = 1.0
"""Seconds between a standby's tries of the lock: how soon it takes over."""

TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))
"""kube-proxy's nftables tables (family, name): fixed names, one set per namespace."""


def netns_lock_path(lock_dir: Path) -> Path:
    """The lock of this process's network namespace, in ``lock_dir`` (the runtime root)."""
    inode = os.stat("/proc/self/ns/net").st_ino
    return lock_dir / f"kube-proxy.net-{inode}.lock"


def cluster_digest(ca_pem: bytes) -> str:
    """A cluster's mark in the lock file: 12 hex digits of its Kubernetes CA's SHA-256."""
    return hashlib.sha256(ca_pem).hexdigest()[:12]


Holder = dict[str, str]
"""What the lock file says of its holder: ``node``, ``data_dir``, ``cluster``."""


def _read_holder(lock: IO[str]) -> Holder:
    lock.seek(0)
    try:
        found = json.loads(lock.read() or "{}")
    except ValueError:
        return {}
    return {str(key): str(value) for key, value in found.items()} if isinstance(found, dict) else {}


def _try_lock(lock: IO[str]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.asynccontextmanager
async def hold_lock(ctx: RunContext, path: Path, holder: Holder) -> AsyncIterator[None]:
    """Until cancelled: wait for the lock at ``path`` (noting who holds it), then hold it
    with ``holder`` written in it for the body's time; the holder removes the file as it
    lets go, so no file is left once no proxy runs (a waiter that locked the removed file
    opens the path anew)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    while True:
        with open(path, "a+") as lock:  # noqa: ASYNC230 - a file in /run, opened once
            if not _try_lock(lock):
                _note_standby(ctx, _read_holder(lock), holder)
                await anyio.sleep(LOCK_RETRY)
                continue
            if not _is_at(lock, path):  # the last holder removed it as it let go
                continue
            lock.seek(0)
            lock.truncate()
            lock.write(json.dumps(holder))
            lock.flush()
            try:
                yield
            finally:
                _remove(path)
            return


def _remove(path: Path) -> None:
    """Remove the lock file as its holder, still locked: no one else writes it now."""
    path.unlink(missing_ok=True)


def _is_at(lock: IO[str], path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino
    except FileNotFoundError:
        return False


def _note_standby(ctx: RunContext, other: Holder, holder: Holder) -> None:
    same = other.get("cluster") == holder["cluster"]
    ctx.set_note(
        f"standby: node {other.get('node', '?')} ({other.get('data_dir', '?')}) runs"
        " kube-proxy in this network namespace"
        + ("" if same else ", for another cluster: no Service of this one is reachable")
    )


def delete_tables(search_path: str | None = None) -> list[str]:
    """Delete kube-proxy's tables in this network namespace; returns ``nft``'s complaints
    other than "no such table" (none: gone or never made)."""
    nft = shutil.which("nft", path=with_sbin(search_path or os.environ.get("PATH", "")))
    if nft is None:
        return ["nft not found: kube-proxy's tables, if any, are left"]
    complaints = []
    for family, name in TABLES:
        done = subprocess.run(
            [nft, "delete", "table", family, name], capture_output=True, text=True, check=False
        )
        if done.returncode != 0 and "No such file or directory" not in done.stderr:
            complaints.append(done.stderr.strip().splitlines()[0] if done.stderr else "")
    return complaints


def kube_proxy_runnable(
    inputs: Callable[[], ProxyInputs], binary: Path | None, state_dir: Path, lock_dir: Path
) -> Runnable:
    """The runnable ``kube_proxy`` (module docstring); with ``binary`` None, only its note
    that it is absent."""
    proxy = component_runnable(KUBE_PROXY, lambda: kube_proxy_plan(inputs()), binary, state_dir)

    async def run(ctx: RunContext) -> None:
        if binary is None:
            await proxy(ctx)
            return
        given = inputs()
        holder = {
            "node": given.node_id,
            "data_dir": str(state_dir),
            "cluster": cluster_digest(given.ca_pem),
        }
        async with hold_lock(ctx, netns_lock_path(lock_dir), holder):
            try:
                await proxy(ctx)
            finally:
                with anyio.CancelScope(shield=True):
                    complaints = await anyio.to_thread.run_sync(delete_tables, given.search_path)
                for complaint in complaints:
                    ctx.log.warning("kube-proxy's tables: %s", complaint)

    return run
