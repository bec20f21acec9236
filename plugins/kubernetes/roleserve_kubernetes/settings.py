"""The plugin's settings: ``[plugins.kubernetes]`` in a node's ``roleserve.toml``.

The ``Setting`` records are the one source of the names, types, defaults and docs: the
``roleserve_settings`` hook declares them, the core checks the file against them, and
``roleserve plugins`` lists them. ``WorkerSettings`` gathers the checked values the
``kubernetes_worker`` worker uses (containerd, its sandbox image, CNI).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roleserve_core import Setting
from roleserve_kubernetes.ports import CONTAINERD_METRICS_PORT

__all__ = [
    "BUSYBOX",
    "CNI_BIN_DIR",
    "CONTAINERD",
    "CONTAINERD_EXECUTABLE",
    "CONTAINERD_INSTALL_HINT",
    "CONTAINERD_METRICS_PORT_SETTING",
    "CTR",
    "SETTINGS",
    "SNAPSHOTTER",
    "WorkerSettings",
]

CONTAINERD_EXECUTABLE = "containerd"
"""The name looked up on ``PATH`` when ``containerd`` is empty (Debian's package)."""

CONTAINERD_INSTALL_HINT = (
    'set `containerd = "/path"` in [plugins.kubernetes] of roleserve.toml, '
    "or apt-get install containerd runc containernetworking-plugins"
)

CONTAINERD: Setting[str] = Setting(
    "containerd",
    str,
    "",
    f"The containerd binary; empty: {CONTAINERD_EXECUTABLE} on PATH. Not found: the "
    "runnable containerd stays DEAD (final) with the paths tried.",
)
CTR: Setting[str] = Setting(
    "ctr",
    str,
    "",
    "containerd's ctr, which imports the sandbox image; empty: ctr on PATH, then next to "
    "the containerd binary.",
)
CONTAINERD_METRICS_PORT_SETTING: Setting[int] = Setting(
    "containerd_metrics_port",
    int,
    CONTAINERD_METRICS_PORT,
    "containerd's metrics port, on 127.0.0.1 (or the node's own address if it is a "
    "loopback one); 0: containerd serves no metrics.",
    minimum=0,
    maximum=65535,
)
BUSYBOX: Setting[str] = Setting(
    "busybox",
    str,
    "/bin/busybox",
    "The static busybox binary the sandbox image is built from (Debian's busybox-static).",
)
CNI_BIN_DIR: Setting[str] = Setting(
    "cni_bin_dir",
    str,
    "/usr/lib/cni",
    "Where the CNI plugins bridge, host-local and loopback are (Debian's "
    "containernetworking-plugins).",
)
SNAPSHOTTER: Setting[str] = Setting(
    "snapshotter",
    str,
    "overlayfs",
    "containerd's snapshotter for containers: overlayfs, or native where the data "
    "directory's file system cannot hold overlay mounts.",
    choices=("overlayfs", "native"),
)
SETTINGS: tuple[Setting[Any], ...] = (
    CONTAINERD,
    CTR,
    CONTAINERD_METRICS_PORT_SETTING,
    BUSYBOX,
    CNI_BIN_DIR,
    SNAPSHOTTER,
)
"""Everything ``[plugins.kubernetes]`` accepts, in the order ``roleserve plugins`` lists."""


@dataclass(frozen=True)
class WorkerSettings:
    """The settings the ``kubernetes_worker`` worker uses (see ``SETTINGS``)."""

    containerd: str = CONTAINERD.default
    """Empty: ``CONTAINERD_EXECUTABLE`` on PATH."""
    ctr: str = CTR.default
    containerd_metrics_port: int = CONTAINERD_METRICS_PORT_SETTING.default
    """0: no metrics."""
    busybox: str = BUSYBOX.default
    cni_bin_dir: str = CNI_BIN_DIR.default
    snapshotter: str = SNAPSHOTTER.default

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> WorkerSettings:
        """The settings of the plugin's ``NodeContext.config`` (checked by the core against
        the allowed values of ``SETTINGS``: a port in range, a snapshotter containerd has)."""
        return cls(
            containerd=CONTAINERD.read(config),
            ctr=CTR.read(config),
            containerd_metrics_port=CONTAINERD_METRICS_PORT_SETTING.read(config),
            busybox=BUSYBOX.read(config),
            cni_bin_dir=CNI_BIN_DIR.read(config),
            snapshotter=SNAPSHOTTER.read(config),
        )
