"""The kubelet's root directory: on disk in the data directory, named by a short path.

The kubelet binds unix sockets in its root directory (``--root-dir``), at places it does
not let anyone choose: ``pod-resources/kubelet.sock``, ``device-plugins/kubelet.sock``,
and, for CSI drivers, ``plugins_registry/`` and ``plugins/<driver>/``. Linux takes 107
bytes of a socket's path, so a data directory deeper than ~48 characters (pytest's
``tmp_path``, a checkout under ``/home/<user>/src/github.com/<org>/``) left the kubelet
no room. The root directory's files (the pods' volumes, its checkpoints) must stay on
disk, in the data directory; only their *name* must be short. So the worker bind-mounts
the data directory's root onto a directory in the node's runtime directory and gives the
kubelet that one::

    <data_dir>/kubelet/root/            the files, on disk (plans.kubelet_root)
        ▲ bind mount (shared), made before the kubelet starts, kept across its restarts
    <runtime_dir>/kubelet/              the kubelet's --root-dir (root_mount_point):
                                        /run/roleserve/<key>/kubernetes/kubelet, 48 bytes

Why a bind mount and not a symlink: the kubelet and its volume code read
``/proc/self/mountinfo`` and compare mount points with the paths they are given (its
root directory must be a shared mount, ``MakeRShared``; volumes are found by mount
point); through a symlink the names would not match and the kubelet would stack a new
bind mount at each start. Made shared here, so the kubelet's check finds it shared and
mounts nothing more.

The mount is undone with the kubelet's own mounts when the role goes or the node stops
(``worker_kubelet``); a node killed leaves it, and its next start finds it in place
(``bind_root`` keeps a mount of the same directory). ``roleserve_core.rundir`` removes a
runtime directory only when no mount is left under it, so the pods' files are never
removed through it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

from roleserve_kubernetes.leftovers import mounts_under

__all__ = ["bind_root", "is_bound", "root_mount_point"]

_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_SHARED = 1 << 20


def root_mount_point(runtime_dir: Path) -> Path:
    """The kubelet's ``--root-dir``: a short directory in the plugin's runtime directory
    (``NodeContext.runtime_dir``), onto which its root directory on disk is mounted."""
    return runtime_dir / "kubelet"


def is_bound(source: Path, target: Path) -> bool:
    """Whether ``target`` is a mount point showing ``source`` (the same directory)."""
    if target not in mounts_under([target]):
        return False
    try:
        held, wanted = target.stat(), source.stat()
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (wanted.st_dev, wanted.st_ino)


def bind_root(source: Path, target: Path) -> bool:
    """Mount ``source`` onto ``target`` (both made if missing), shared, unless it is
    mounted there already (a kubelet restarting, or a node killed before it unmounted).

    :returns: whether it mounted now.
    :raises OSError: the mount failed (naming both directories).
    """
    source.mkdir(mode=0o700, parents=True, exist_ok=True)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    if is_bound(source, target):
        return False
    _mount(source, target, _MS_BIND)
    _mount(None, target, _MS_SHARED | _MS_REC)
    return True


def _mount(source: Path | None, target: Path, flags: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    raw_source = None if source is None else os.fsencode(source)
    if libc.mount(raw_source, os.fsencode(target), None, flags, None) != 0:
        code = ctypes.get_errno()
        what = f"bind-mount {source} onto {target}" if source else f"make {target} shared"
        raise OSError(code, f"cannot {what}: {os.strerror(code)}")
