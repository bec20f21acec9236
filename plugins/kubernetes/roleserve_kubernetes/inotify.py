"""Whether this machine's user is short of inotify instances, which a local cluster's
kubelets and containerds need.

Each kubelet holds about six inotify instances (cAdvisor, its certificates, the plugin
watcher), each containerd one (CRI's CNI configuration watcher). Linux allows a user 128 by
default (``fs.inotify.max_user_instances``), which a local cluster of some fifteen nodes
uses up: the kubelets that come after fail to start cAdvisor ("inotify_init: too many open
files") and their Nodes never become Ready. ``cluster up`` says so, naming the sysctl,
instead of waiting in silence.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["INOTIFY", "NEARLY", "inotify_shortage", "inotify_usage"]

INOTIFY = "anon_inode:inotify"
"""What ``/proc/PID/fd/N`` links to for an inotify instance."""
NEARLY = 0.9
"""The share of the limit in use from which the user is told."""


def inotify_usage(proc: Path = Path("/proc")) -> tuple[int, int]:
    """The inotify instances this process's user holds, and the most it may."""
    limit = int((proc / "sys/fs/inotify/max_user_instances").read_text())
    uid, held = os.getuid(), 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            held += sum(1 for fd in (entry / "fd").iterdir() if os.readlink(fd) == INOTIFY)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return held, limit


def inotify_shortage(proc: Path = Path("/proc")) -> str | None:
    """One line if the user's inotify instances are (nearly) all in use; None if not."""
    try:
        held, limit = inotify_usage(proc)
    except (OSError, ValueError):
        return None  # not Linux's /proc: nothing to say
    if held < limit * NEARLY:
        return None
    return (
        f"Kubernetes: {held} of this user's {limit} inotify instances are in use, and each "
        "kubelet needs about six: kubelets may fail to start (inotify_init: too many open "
        "files); raise the limit, e.g. `sysctl -w fs.inotify.max_user_instances=1024`"
    )
