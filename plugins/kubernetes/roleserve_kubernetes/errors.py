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
        ├── RuntimeCannotRunError     (also ExpectedError) containerd cannot start a
        │                             container (runtimecheck): runc's error, in one line
        ├── PodPrefixChangedError     (also ExpectedError) the node's pod prefix changed
        │                             under running pods: containerd starts over
        ├── PodNetworkError           the node's curator-allocated prefix cannot hold a pod
        │                             network (too small, or does not parse)
        ├── ComponentNotReadyError    (also ExpectedError) a kube component that was ready
        │                             has not answered ready for a while: restarted
        ├── KubeAPIError              (also ExpectedError) a call of the plugin's own to the
        │                             apiserver failed (``kubeapi``): retried after the backoff
        └── KubeBuildError            ``./dev kube-binaries`` cannot build the pinned kube
                                      binaries (no Go, a failed build); says what to do

``SocketPathError`` and ``SandboxImageError`` are final: a restart meets the same
directory and the same missing file; the operator changes the setting named or installs
busybox-static and runs ``roleserve ctl restart``. ``ImageImportError``,
``RuntimeNotReadyError`` and ``RuntimeCannotRunError`` are cured by a restart after the
backoff, if at all by one (a runc fixed, cgroups mounted: the next check passes);
``PodPrefixChangedError`` asks for that restart: the pods and the bridge holding the old
prefix's gateway go, and the next pods get addresses of the new one.
``KubeBuildError`` is the build's, never a node's: ``kubebuild`` prints it as its one line.
``PodNetworkError`` never fails a runnable: ``pod_network`` shows it as its note and waits
for another prefix.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from roleserve_core import ExpectedError, FinalError, RoleserveError

__all__ = [
    "ComponentNotReadyError",
    "ImageImportError",
    "KubeAPIError",
    "KubeBuildError",
    "KubernetesError",
    "PodNetworkError",
    "PodPrefixChangedError",
    "RuntimeCannotRunError",
    "RuntimeNotReadyError",
    "SandboxImageError",
    "SocketPathError",
]


class KubernetesError(RoleserveError):
    """Base of the plugin's errors."""


class SocketPathError(KubernetesError, FinalError):
    """A socket's path (containerd's ``.ttrpc`` twin, say) is longer than the program that
    binds it takes; names the path, its length, the limit and the setting to change."""

    def __init__(
        self, path: Path, limit: int, program: str | None = None, setting: str | None = None
    ) -> None:
        self.path = path
        if program is None or setting is None:
            super().__init__(_old_message(path, limit))
            return
        super().__init__(
            f"{program}'s socket {path} is {len(os.fsencode(path))} bytes, more than "
            f"{program} takes ({limit}); {setting}"
        )


def _old_message(socket: Path, limit: int) -> str:
    """``SocketPathError(socket, limit)``'s message, as before ``program`` and ``setting``
    (0.1.0: ``socket`` is containerd's gRPC socket, the message names its ``.ttrpc`` twin).
    Deprecated, with a warning naming the new arguments."""
    warnings.warn(
        "SocketPathError(path, limit) is deprecated: pass program and setting too "
        "(SocketPathError(path, limit, program, setting)), naming the program that binds "
        "the socket and the setting to change",
        DeprecationWarning,
        stacklevel=3,
    )
    return (
        f"containerd's socket {socket}.ttrpc is {len(os.fsencode(socket)) + 6} bytes, more "
        f"than a unix socket takes ({limit}); give the node a shorter --data-dir"
    )


class SandboxImageError(KubernetesError, FinalError):
    """The sandbox image cannot be built (no static busybox binary)."""


class ImageImportError(KubernetesError, ExpectedError):
    """``ctr image import`` of the sandbox image failed."""


class RuntimeNotReadyError(KubernetesError, ExpectedError):
    """containerd answers CRI, but does not report its runtime ready in time."""


class RuntimeCannotRunError(KubernetesError, ExpectedError):
    """containerd runs, but cannot start a container (``runtimecheck``): the message says
    why in one line (runc's error)."""


class PodPrefixChangedError(KubernetesError, ExpectedError):
    """The node's pod prefix changed while containerd ran pods of the old one."""


class PodNetworkError(KubernetesError):
    """The node's prefix cannot hold a pod network; the message names the prefix."""


class ComponentNotReadyError(KubernetesError, ExpectedError):
    """A kube component that was ready has stopped answering ready (hung, stopped, lost
    its etcd) for ``probe.UNREADY_LIMIT`` seconds: its runnable fails, so it is not left
    HEALTHY, and the supervisor starts it again after the backoff."""


class KubeAPIError(KubernetesError, ExpectedError):
    """The apiserver did not answer a call of the plugin's own (``kubeapi``: the node
    clean-up's list or delete) as it should; names the call, the server and why."""


class KubeBuildError(KubernetesError):
    """The pinned kube binaries cannot be built (``kubebuild``); the message is one line
    saying what to do."""
