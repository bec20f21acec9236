"""Where the worker keeps containerd, its CNI configuration and its sandbox image: all
under the plugin's data directory, so several nodes on one machine never share a file or
a bridge; and containerd's sockets in the plugin's runtime directory
(``NodeContext.runtime_dir``), short whatever the data directory's length.

::

    <data_dir>/
    ├── containerd.process.json    the program runner's record of containerd
    ├── containerd/config.toml     generated at each start (containerd_config)
    ├── containerd/root/           containerd's root: images, snapshots, metadata
    ├── containerd/state/          containerd's state: tasks, runc's state, pod netns mounts
    ├── cni/net.d/10-roleserve.conflist   the pod network (cni), rewritten on a new prefix
    ├── cni/ipam/                  host-local's allocations
    └── sandbox-image.tar          the sandbox image (image), imported at each start
    <runtime_dir>/                 /run/roleserve/<node key>/kubernetes (roleserve_core.rundir)
    ├── containerd.sock            containerd's gRPC socket (CRI, ctr)
    └── containerd.sock.ttrpc      containerd's ttrpc socket, for its shims

containerd refuses a socket path longer than 104 bytes (on every OS: the BSDs' limit), and
listens on ``<socket>.ttrpc`` too. Under ``/run/roleserve`` the longer is about 60 bytes;
only a node run by another user, under a deep ``$XDG_RUNTIME_DIR``, could exceed it, which
is one final error naming the path and that variable (``check_socket_path``), not
containerd's crash loop.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from roleserve_core import NodeContext
from roleserve_core.environment import RUNTIME_DIR_ENV
from roleserve_kubernetes.errors import SocketPathError

__all__ = [
    "CONTAINERD_SOCKET_PATH_LIMIT",
    "SOCKET_PATH_LIMIT",
    "TTRPC_SUFFIX",
    "WorkerLayout",
    "check_kubelet_root",
    "check_socket_path",
]

SOCKET_PATH_LIMIT = 107
"""Bytes of a unix socket's path on Linux (``sun_path`` is 108 with the terminating NUL):
what a Go program such as the kubelet binds. Its value and meaning since 0.1.0; containerd
takes fewer, ``CONTAINERD_SOCKET_PATH_LIMIT``. (Kept, not deprecated: it still says what it
always said, and the kubelet's check uses it; a plugin that compared containerd's socket
with it now reads the new name for containerd's own limit.)"""

CONTAINERD_SOCKET_PATH_LIMIT = 104
"""Bytes of a socket path containerd accepts (its ``sys.CreateUnixSocket``: "unix socket
path too long (> 104)"), fewer than Linux's ``SOCKET_PATH_LIMIT``."""

KUBELET_SOCKET = Path("pod-resources") / "kubelet.sock"
"""The socket the kubelet binds in its root directory (its pod-resources API)."""

TTRPC_SUFFIX = ".ttrpc"
"""containerd's second socket, for its shims: the gRPC socket's path plus this."""

CNI_CONFIG_NAME = "10-roleserve.conflist"

_SHORTER_RUNTIME_DIR = (
    f"set {RUNTIME_DIR_ENV} to a shorter directory (the node's sockets go under it)"
)


@dataclass(frozen=True, init=False)
class WorkerLayout:
    """The worker's paths under ``directory`` (the plugin's data directory).

    ``WorkerLayout(directory)`` without ``runtime_dir``, as before there was one, still
    works, with a ``DeprecationWarning``: the sockets are then in ``directory``, where they
    were (the layout it describes is the one an older worker made), which a deep data
    directory makes too long for containerd.
    """

    directory: Path
    runtime_dir: Path
    """The plugin's runtime directory (``NodeContext.runtime_dir``): the sockets."""

    def __init__(self, directory: Path, runtime_dir: Path | None = None) -> None:
        if runtime_dir is None:
            warnings.warn(
                "WorkerLayout(directory) without runtime_dir is deprecated: pass "
                "runtime_dir=NodeContext.runtime_dir (WorkerLayout.of(node) does); until "
                "then containerd's sockets are in directory, as before",
                DeprecationWarning,
                stacklevel=2,
            )
            runtime_dir = directory
        object.__setattr__(self, "directory", directory)
        object.__setattr__(self, "runtime_dir", runtime_dir)

    @classmethod
    def of(cls, node: NodeContext) -> WorkerLayout:
        """The layout of the plugin running as ``node``."""
        return cls(node.data_dir, node.runtime_dir)

    @property
    def socket(self) -> Path:
        return self.runtime_dir / "containerd.sock"

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
    """Refuse a socket whose ``.ttrpc`` twin is longer than containerd takes.

    :raises SocketPathError: one line naming the path and the setting to change (final).
    """
    ttrpc = socket.with_name(socket.name + TTRPC_SUFFIX)
    if len(str(ttrpc).encode()) > CONTAINERD_SOCKET_PATH_LIMIT:
        raise SocketPathError(
            ttrpc,
            CONTAINERD_SOCKET_PATH_LIMIT,
            "containerd",
            _SHORTER_RUNTIME_DIR,
        )


def check_kubelet_root(root: Path) -> None:
    """Refuse a kubelet root directory too deep for the socket the kubelet binds there.

    The kubelet is given its root directory by a short name in the runtime directory
    (``kubeletroot``: the files stay on disk in the data directory), so only a runtime
    directory that deep is refused: in one line, not the kubelet's own exit.

    :raises SocketPathError: one line naming the path and the setting to change (final).
    """
    socket = root / KUBELET_SOCKET
    if len(str(socket).encode()) > SOCKET_PATH_LIMIT:
        raise SocketPathError(
            socket,
            SOCKET_PATH_LIMIT,
            "kubelet",
            _SHORTER_RUNTIME_DIR,
        )
