"""The plugin's errors, in one tree.

::

    RoleserveError (roleserve_core.errors)
    └── KubernetesError               a failure of the kubernetes plugin, told in one line
        ├── SocketPathError           (also FinalError) a socket's path is longer than its
        │                             program takes; names the path and the setting
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

``SocketPathError`` and ``SandboxImageError`` are final: a restart meets the same
directory and the same missing file; the operator changes the setting named or installs
busybox-static and runs ``roleserve ctl restart``. ``ImageImportError`` and
``RuntimeNotReadyError`` are cured by a restart after the backoff, if at all by one;
``PodPrefixChangedError`` asks for that restart: the pods and the bridge holding the old
prefix's gateway go, and the next pods get addresses of the new one.
``PodNetworkError`` never fails a runnable: ``pod_network`` shows it as its note and waits
for another prefix.
"""

from __future__ import annotations

import os
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
    """A socket's path (containerd's ``.ttrpc`` twin, say) is longer than the program that
    binds it takes; names the path, its length, the limit and the setting to change."""

    def __init__(self, path: Path, limit: int, program: str, setting: str) -> None:
        self.path = path
        super().__init__(
            f"{program}'s socket {path} is {len(os.fsencode(path))} bytes, more than "
            f"{program} takes ({limit}); {setting}"
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
