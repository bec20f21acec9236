"""What containerd leaves when it stops: its shims, their containers, and mounts.

The program runner stops containerd's process group (``roleserve_core.process``), but
containerd starts each shim in a process group of its own (``Setpgid``: so that a Ctrl-C
to containerd does not kill running containers), and each container runs in a PID
namespace under its shim. Stopping containerd therefore stops neither, by design: a
containerd restarted reconnects to them. A worker whose role is removed must leave
nothing, so after containerd has stopped (and before it starts, for the leftovers of a
killed node) this module:

::

    /proc/*/cmdline: containerd-shim* ... -address <this node's socket>   (provably ours:
        │            the socket is in this node's runtime directory, keyed by its data
        │            directory, so no other node's)
        ├── their descendants (the containers' processes), then the shims: SIGKILL,
        │   until /proc shows none left (zombies count as gone)
    /proc/self/mountinfo: mount points under containerd's root or state (overlay rootfs,
        sandbox shm, pod network namespaces) ──▶ umount2(MNT_DETACH), deepest first
    the node's pod bridge (``rsp…``, made by the CNI bridge plugin for the first pod) ──▶
        deleted if it is a bridge (``ip link del``), with the pods' gateway address: the
        next start may have another prefix, which the bridge plugin refuses to add to a
        bridge holding the old one

Mounts are this process's mount namespace's: containerd runs in the node's (the test kit's
``nsenter --net`` changes only the network namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import itertools
import json
import logging
import os
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path

import anyio

from roleserve_core import mount_points_under, read_stat, read_stats

__all__ = [
    "KILL_WAIT",
    "descendants",
    "mounts_under",
    "remove_bridge",
    "remove_leftovers",
    "shim_pids",
    "unmount",
]

KILL_WAIT = 10.0
"""Seconds to wait for killed shims and containers to be gone."""

_PROC = Path("/proc")
_MNT_DETACH = 2


def _cmdline(pid: str) -> list[str]:
    try:
        raw = (_PROC / pid / "cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")


def _pids() -> list[str]:
    return [entry for entry in os.listdir(_PROC) if entry.isdigit()]


def shim_pids(socket: Path) -> list[int]:
    """The shims started by the containerd at ``socket`` (their ``-address`` argument)."""
    found = []
    for pid in _pids():
        arguments = _cmdline(pid)
        if not arguments or not Path(arguments[0]).name.startswith("containerd-shim"):
            continue
        for flag, value in itertools.pairwise(arguments):
            if flag in ("-address", "--address") and value == str(socket):
                found.append(int(pid))
                break
    return found


def _parents() -> dict[int, int]:
    """pid → parent pid, of every process /proc shows (zombies too)."""
    return {stat.pid: stat.ppid for stat in read_stats()}


def descendants(roots: Iterable[int]) -> list[int]:
    """Every process below ``roots`` (not the roots themselves)."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    pending = list(roots)
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _alive(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and not stat.gone


async def kill_shims(socket: Path, log: logging.Logger) -> int:
    """SIGKILL the shims of ``socket`` and everything under them; the number killed.

    Waits (up to ``KILL_WAIT``) until none of them runs any more.
    """
    shims = shim_pids(socket)
    if not shims:
        return 0
    # The shims first: a shim that saw its container die would clean up and exit by
    # itself, racing the kill; the containers are known by pid already.
    victims = shims + descendants(shims)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    log.warning(
        "killed %d shim(s) of %s and %d process(es) under them",
        len(shims),
        socket,
        len(victims) - len(shims),
    )
    with anyio.move_on_after(KILL_WAIT):
        while any(_alive(pid) for pid in victims):  # noqa: ASYNC110 - /proc tells no one
            await anyio.sleep(0.02)
    return len(victims)


def mounts_under(directories: Iterable[Path], mountinfo: str | None = None) -> list[Path]:
    """Mount points at or under ``directories``, deepest first (as they must be undone).

    :param mountinfo: the text of a mountinfo file; None: this process's.
    """
    if mountinfo is None:
        mountinfo = (_PROC / "self" / "mountinfo").read_text()
    found = {point for root in directories for point in mount_points_under(root, mountinfo)}
    return sorted(found, key=lambda p: (-len(p.parts), str(p)))


def unmount(point: Path) -> None:
    """Detach the mount at ``point`` (lazily: a busy one goes once it is free).

    :raises OSError: for any failure but "not mounted any more".
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.umount2(str(point).encode(), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOENT):
            raise OSError(code, f"cannot unmount {point}: {os.strerror(code)}")


async def remove_bridge(name: str, netns: str | None, log: logging.Logger) -> bool:
    """Delete the interface ``name`` if it is a bridge, in ``netns`` (None: the node's);
    True if it was there. A failure is logged, not raised."""
    ip = ["ip", *(["-n", netns] if netns else [])]
    shown = await anyio.run_process([*ip, "-j", "-d", "link", "show", "dev", name], check=False)
    try:
        [link] = json.loads(shown.stdout or b"[]")
    except ValueError:
        return False
    if link.get("linkinfo", {}).get("info_kind") != "bridge":
        return False
    deleted = await anyio.run_process([*ip, "link", "del", "dev", name], check=False)
    if deleted.returncode != 0:
        log.error("cannot delete the pod bridge %s: %s", name, deleted.stderr.decode().strip())
        return False
    log.info("deleted the pod bridge %s", name)
    return True


async def remove_leftovers(
    socket: Path,
    directories: Sequence[Path],
    log: logging.Logger,
    bridge: str | None = None,
    netns: str | None = None,
) -> None:
    """Kill the shims of ``socket`` (and their containers), unmount everything under
    ``directories``, delete the pods' ``bridge`` (in ``netns``). Logs what it did; an
    unmount or a deletion that fails is logged, not raised."""
    await kill_shims(socket, log)
    points = mounts_under(directories)
    for point in points:
        try:
            unmount(point)
        except OSError as exc:
            log.error("%s", exc)
    if points:
        log.info(
            "unmounted %d leftover mount(s) under %s", len(points), ", ".join(map(str, directories))
        )
    if bridge is not None:
        await remove_bridge(bridge, netns, log)
