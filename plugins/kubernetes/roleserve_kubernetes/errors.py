"""The plugin's errors, in one tree.

::

    RoleserveError (roleserve_core.errors)
    └── KubernetesError               a failure of the kubernetes plugin, told in one line
        ├── SocketPathError           (also FinalError) containerd's socket path is too long
        │                             for a unix socket; names the path and what to do
        ├── SandboxImageError         (also FinalError) the sandbox image cannot be built:
        │                             no static busybox; names the path and the setting
        ├── ImageImportError          (also ExpectedError) ``ctr image import`` failed; its
        │                             last output
        ├── RuntimeNotReadyError      (also ExpectedError) containerd answered CRI Status
        │                             but never said its runtime is ready
        ├── PodPrefixChangedError     (also ExpectedError) the node's pod prefix changed
        │                             under running pods: containerd starts over
        └── PodNetworkError           the node's curator-allocated prefix cannot hold a pod
                                      network (too small, or does not parse)

``SocketPathError`` and ``SandboxImageError`` are final: a restart meets the same data
directory and the same missing file; the operator moves the data directory or installs
busybox-static and runs ``roleserve ctl restart``. ``ImageImportError`` and
``RuntimeNotReadyError`` are cured by a restart after the backoff, if at all by one;
``PodPrefixChangedError`` asks for that restart: the pods and the bridge holding the old
prefix's gateway go, and the next pods get addresses of the new one.
``PodNetworkError`` never fails a runnable: ``pod_network`` shows it as its note and waits
for another prefix.
"""

from __future__ import annotations

from pathlib import Path

from roleserve_core import ExpectedError, FinalError, RoleserveError

__all__ = [
    "ImageImportError",
    "KubernetesError",
    "PodNetworkError",
    "PodPrefixChangedError",
    "RuntimeNotReadyError",
    "SandboxImageError",
    "SocketPathError",
]


class KubernetesError(RoleserveError):
    """Base of the plugin's errors."""


class SocketPathError(KubernetesError, FinalError):
    """containerd's socket (or its ``.ttrpc`` twin) would not fit a unix socket address."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        super().__init__(
            f"containerd's socket {path}.ttrpc is {len(str(path)) + 6} bytes, more than a "
            f"unix socket takes ({limit}); give the node a shorter --data-dir"
        )


class SandboxImageError(KubernetesError, FinalError):
    """The sandbox image cannot be built (no static busybox binary)."""


class ImageImportError(KubernetesError, ExpectedError):
    """``ctr image import`` of the sandbox image failed."""


class RuntimeNotReadyError(KubernetesError, ExpectedError):
    """containerd answers CRI, but does not report its runtime ready in time."""


class PodPrefixChangedError(KubernetesError, ExpectedError):
    """The node's pod prefix changed while containerd ran pods of the old one."""


class PodNetworkError(KubernetesError):
    """The node's prefix cannot hold a pod network; the message names the prefix."""
