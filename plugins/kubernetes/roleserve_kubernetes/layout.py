"""Where the worker keeps containerd, its CNI configuration and its sandbox image: all
under the plugin's data directory, so several nodes on one machine never share a file,
a socket or a bridge.

::

    <data_dir>/
    ├── containerd.sock            containerd's gRPC socket (and containerd.sock.ttrpc)
    ├── containerd.process.json    the program runner's record of containerd
    ├── containerd/config.toml     generated at each start (containerd_config)
    ├── containerd/root/           containerd's root: images, snapshots, metadata
    ├── containerd/state/          containerd's state: tasks, runc's state, pod netns mounts
    ├── cni/net.d/10-roleserve.conflist   the pod network (cni), rewritten on a new prefix
    ├── cni/ipam/                  host-local's allocations
    └── sandbox-image.tar          the sandbox image (image), imported at each start

A unix socket's address holds 107 bytes and a NUL (``sun_path``); containerd also listens
on ``<socket>.ttrpc``. A data directory too deep for that is one final error naming the
path (``check_socket_path``), not containerd's own failure to bind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from roleserve_kubernetes.errors import SocketPathError

__all__ = ["SOCKET_PATH_LIMIT", "TTRPC_SUFFIX", "WorkerLayout", "check_socket_path"]

SOCKET_PATH_LIMIT = 107
"""Bytes of a unix socket's path (``sun_path`` is 108 with the terminating NUL)."""

TTRPC_SUFFIX = ".ttrpc"
"""containerd's second socket, for its shims: the gRPC socket's path plus this."""

CNI_CONFIG_NAME = "10-roleserve.conflist"


@dataclass(frozen=True)
class WorkerLayout:
    """The worker's paths under ``directory`` (the plugin's data directory)."""

    directory: Path

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def containerd_dir(self) -> Path:
        return self.directory / "containerd"

    @property
    def config(self) -> Path:
        return self.containerd_dir / "config.toml"

    @property
    def root(self) -> Path:
        return self.containerd_dir / "root"

    @property
    def state(self) -> Path:
        return self.containerd_dir / "state"

    @property
    def cni_conf_dir(self) -> Path:
        return self.directory / "cni" / "net.d"

    @property
    def cni_config(self) -> Path:
        return self.cni_conf_dir / CNI_CONFIG_NAME

    @property
    def ipam_dir(self) -> Path:
        return self.directory / "cni" / "ipam"

    @property
    def image_tar(self) -> Path:
        return self.directory / "sandbox-image.tar"


def check_socket_path(socket: Path) -> None:
    """Refuse a socket whose path (or its ``.ttrpc`` twin) is too long for a unix socket.

    :raises SocketPathError: one line naming the path and what to do (final).
    """
    if len(str(socket).encode()) + len(TTRPC_SUFFIX) > SOCKET_PATH_LIMIT:
        raise SocketPathError(socket, SOCKET_PATH_LIMIT)
