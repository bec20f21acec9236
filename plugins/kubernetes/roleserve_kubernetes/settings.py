"""The plugin's settings: ``[plugins.kubernetes]`` in a node's ``roleserve.toml``.

``WorkerSettings`` declares each setting the ``kubernetes_worker`` worker uses (containerd,
its sandbox image, CNI) once, as a field (``roleserve_core.setting``): its name, type,
default, doc and allowed values (a port in range, a snapshotter containerd has) make the
``Setting`` record the ``roleserve_settings`` hook declares (``SETTINGS``), the core checks
the file against, and ``roleserve plugins`` lists; ``WorkerSettings.of`` gathers the checked
values. The kube binaries' settings are ``binaries``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roleserve_core import (
    NETWORK,
    PluginSettings,
    PluginValues,
    Setting,
    endpoint,
    former_setting_constants,
    local_exporter_host,
    port_setting,
    setting,
)
from roleserve_kubernetes.ports import CONTAINERD_METRICS_PORT

__all__ = [
    "CONTAINERD_EXECUTABLE",
    "CONTAINERD_INSTALL_HINT",
    "SETTINGS",
    "WorkerSettings",
    "metrics_address",
]

CONTAINERD_EXECUTABLE = "containerd"
"""The name looked up on ``PATH`` when ``containerd`` is empty (Debian's package)."""

CONTAINERD_INSTALL_HINT = (
    'set `containerd = "/path"` in [plugins.kubernetes] of roleserve.toml, '
    "or apt-get install containerd runc containernetworking-plugins"
)


@dataclass(frozen=True)
class WorkerSettings(PluginSettings):
    """The settings the ``kubernetes_worker`` worker uses."""

    containerd: str = setting(
        "containerd",
        str,
        "",
        f"The containerd binary; empty: {CONTAINERD_EXECUTABLE} on PATH. Not found: the "
        "runnable containerd stays DEAD (final) with the paths tried.",
    )
    """Empty: ``CONTAINERD_EXECUTABLE`` on PATH."""
    ctr: str = setting(
        "ctr",
        str,
        "",
        "containerd's ctr, which imports the sandbox image; empty: ctr on PATH, then next to "
        "the containerd binary.",
    )
    containerd_metrics_port: int = port_setting(
        "containerd_metrics_port",
        CONTAINERD_METRICS_PORT,
        "containerd's metrics port, on 127.0.0.1 (or the node's own address if it is a "
        "loopback one); 0: containerd serves no metrics.",
        allow_zero=True,
    )
    """0: no metrics."""
    busybox: str = setting(
        "busybox",
        str,
        "/bin/busybox",
        "The static busybox binary the sandbox image is built from (Debian's busybox-static).",
    )
    cni_bin_dir: str = setting(
        "cni_bin_dir",
        str,
        "/usr/lib/cni",
        "Where the CNI plugins bridge, host-local and loopback are (Debian's "
        "containernetworking-plugins).",
    )
    snapshotter: str = setting(
        "snapshotter",
        str,
        "overlayfs",
        "containerd's snapshotter for containers: overlayfs, or native where the data "
        "directory's file system cannot hold overlay mounts.",
        choices=("overlayfs", "native"),
    )


SETTINGS: tuple[Setting[Any], ...] = WorkerSettings.declared()
"""Everything ``[plugins.kubernetes]`` accepts beside the kube binaries' (``binaries``), in
the order ``roleserve plugins`` lists."""


if not TYPE_CHECKING:
    # Before WorkerSettings, each setting then declared was a ``Setting`` constant of
    # this module, named here as git history has them (a setting added since has
    # none); they still answer, with a warning naming the field's record.
    __getattr__ = former_setting_constants(
        __name__,
        WorkerSettings,
        renamed={"CONTAINERD_METRICS_PORT_SETTING": "containerd_metrics_port"},
        constants=("CONTAINERD", "CTR", "BUSYBOX", "CNI_BIN_DIR", "SNAPSHOTTER"),
    )


def metrics_address(values: PluginValues, settings: WorkerSettings) -> str | None:
    """Where containerd serves metrics: the node's local exporter host (its own address
    if that is a loopback one, else 127.0.0.1) at the configured port; None if the port
    is 0. Here rather than in ``containerd`` (which exports it too) for the hooks, which
    name it to the metrics plugin on every node and stay light."""
    if not settings.containerd_metrics_port:
        return None
    network = values.read(NETWORK)
    address = network.get_nowait().external_address if network.statistics().is_set else None
    host = local_exporter_host(address) if address is not None else "127.0.0.1"
    return endpoint(host, settings.containerd_metrics_port)
