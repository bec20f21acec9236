"""The kubelet's own cgroup root: several kubelets on one machine never share a cgroup.

::

    cgroup_root(node ID) = /roleserve-<10 hex of the ID's SHA-256>   (the kubelet's
        cgroupRoot, cgroupDriver cgroupfs: its pods under <root>/kubepods/...)

    before the kubelet starts: create_cgroup_root
        every mounted hierarchy (/proc/self/mountinfo: cgroup v1 and v2)
        └── mkdir <hierarchy>/<root>; v1 cpuset: cpus and mems copied from the parent
            (a new cpuset is empty, and a process cannot join an empty one)
    when the kubelet's role goes: remove_cgroup_root
        wait for the pods' processes to leave (containerd's clean-up stops the pods),
        SIGKILL what is still there after KILL_AFTER, then rmdir the tree, deepest first

Why every hierarchy: the kubelet refuses a ``cgroupRoot`` that does not exist in each
hierarchy it uses (v1: cpu, cpuacct, cpuset, memory, pids, systemd …; these machines are
hybrid, v1 plus an empty ``unified``), and ``mkdir`` where nobody looks costs nothing.
Without its own root, every kubelet of the machine would use ``/kubepods`` and remove the
others' pod cgroups as orphans of its own.

Everything here is under this node's root only: the processes killed are those in it
(its own pods' containers, which the kubelet put there), never another node's.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
from collections.abc import Iterable
from pathlib import Path

import anyio

__all__ = [
    "CGROUP_ROOT_PREFIX",
    "KILL_AFTER",
    "REMOVE_TIMEOUT",
    "cgroup_hierarchies",
    "cgroup_root",
    "create_cgroup_root",
    "remove_cgroup_root",
]

CGROUP_ROOT_PREFIX = "/roleserve-"
KILL_AFTER = 20.0
"""Seconds the pods' processes may take to go by themselves (containerd's clean-up stops
the pods over CRI) before what is left in the node's cgroup root is killed."""
REMOVE_TIMEOUT = 40.0
"""Seconds the removal may take in all; what is left then is logged, not waited for."""
POLL = 0.2
MOUNTINFO = Path("/proc/self/mountinfo")
_CPUSET_FILES = ("cpuset.cpus", "cpuset.mems")


def cgroup_root(node_id: str) -> str:
    """The kubelet's ``cgroupRoot`` for node ``node_id``: one per node."""
    return CGROUP_ROOT_PREFIX + hashlib.sha256(node_id.encode()).hexdigest()[:10]


def cgroup_hierarchies(mountinfo: Path = MOUNTINFO) -> list[Path]:
    """The mount points of every cgroup hierarchy (v1 and v2) this process sees."""
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for line in mountinfo.read_text().splitlines():
            mount, _, fs = line.partition(" - ")
            fields = mount.split()
            if len(fields) > 4 and fs.split()[:1] in (["cgroup"], ["cgroup2"]):
                path = Path(_unescaped(fields[4]))
                if path not in found:
                    found.append(path)
    return found


def _unescaped(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space) undone."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def create_cgroup_root(root: str, hierarchies: Iterable[Path]) -> list[Path]:
    """``root`` in each hierarchy (kept if it exists); the directories. Blocking.

    :raises OSError: naming the directory that cannot be made.
    """
    made = []
    for hierarchy in hierarchies:
        directory = hierarchy / root.lstrip("/")
        directory.mkdir(exist_ok=True)
        for name in _CPUSET_FILES:
            _inherit(hierarchy / name, directory / name)
        made.append(directory)
    return made


def _inherit(parent: Path, child: Path) -> None:
    """A v1 cpuset file of a new cpuset, copied from its parent when empty."""
    if not parent.is_file():
        return
    try:
        empty = child.read_text().strip() == ""
    except FileNotFoundError:  # only a directory standing in for a hierarchy lacks it
        empty = True
    if empty:
        child.write_text(parent.read_text())


async def remove_cgroup_root(
    log: logging.Logger,
    root: str,
    hierarchies: Iterable[Path],
    kill_after: float = KILL_AFTER,
    give_up_after: float = REMOVE_TIMEOUT,
) -> bool:
    """``root`` and everything under it gone from each hierarchy; True if it is.

    Waits for the processes in it to leave, kills them after ``kill_after``, and logs what
    is left after ``give_up_after`` (a warning naming the directories) instead of waiting more.
    """
    trees = [hierarchy / root.lstrip("/") for hierarchy in hierarchies]
    # Polled: a cgroup tells no one when its last process leaves (v1 has no event for it).
    with anyio.move_on_after(give_up_after):
        with anyio.move_on_after(kill_after):
            while await anyio.to_thread.run_sync(_remove_trees, trees):  # noqa: ASYNC110
                await anyio.sleep(POLL)
        while await anyio.to_thread.run_sync(_kill_and_remove, trees):  # noqa: ASYNC110
            await anyio.sleep(POLL)
    left = [str(tree) for tree in trees if tree.exists()]
    if left:
        log.warning("cannot remove the kubelet's cgroups (processes left in them): %s", left)
        return False
    log.info("removed the kubelet's cgroup root %s", root)
    return True


def _kill_and_remove(trees: list[Path]) -> bool:
    for pid in _processes(trees):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return _remove_trees(trees)


def _processes(trees: list[Path]) -> set[int]:
    pids: set[int] = set()
    for tree in trees:
        for directory in _deepest_first(tree):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(pid) for pid in (directory / "cgroup.procs").read_text().split())
    return pids


def _remove_trees(trees: list[Path]) -> bool:
    """rmdir every cgroup of ``trees``, deepest first; True while any is left."""
    left = False
    for tree in trees:
        for directory in _deepest_first(tree):
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:  # EBUSY: processes in it; anything else is named at the end
                left = True
    return left


def _deepest_first(tree: Path) -> list[Path]:
    """``tree`` and the cgroups below it, children before their parents."""
    if not tree.is_dir():
        return []
    found = [Path(top) for top, _, _ in os.walk(tree)]
    return sorted(found, key=lambda path: len(path.parts), reverse=True)
