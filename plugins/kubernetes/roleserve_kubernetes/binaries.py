"""The kube binaries: where each is found, and what a node says when one is missing.

::

    [plugins.kubernetes] kube_apiserver = "/path"  ── set: the only candidate
                    │ empty
                    ▼
    the pinned build (kubebuild.pinned_bin_dir(): ./dev kube-binaries) ── there ──▶ it
                    │ not built
                    ▼
    kube-apiserver on PATH ── found ──▶ its path: the runnable starts it
                    │ not found
                    ▼
    None: the runnable stays NEW (not running, never HEALTHY) with the note
          "kube-apiserver not found: ..."

A configured path is used as it is: if it is missing or not executable, the runnable is
DEAD with the runner's final error naming it (the operator's setting is wrong). A binary
that is there but exits at once is DEAD with its last error lines, restarted after the
backoff.

A missing kube binary (nothing configured, none on PATH) is a state of the node, not a
failure: Debian ships none of them (the plugin's README, "Which Kubernetes"), so a node
without them still runs containerd, the pod network and everything else. Restarting
cannot conjure a binary, so the runnable does not crash-loop; it is not HEALTHY either,
since nothing runs: it stays NEW and shows the note in ``roleserve ctl tree`` until the
operator installs the binary and restarts it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roleserve_core import ProgramNotFoundError, ProgramSpec, Setting, resolve_binary
from roleserve_kubernetes.kubebuild import pinned_bin_dir

__all__ = [
    "APISERVER",
    "COMPONENTS",
    "CONTROLLER_MANAGER",
    "KUBELET",
    "KUBE_PROXY",
    "SCHEDULER",
    "SETTINGS",
    "Component",
    "KubeBinaries",
    "find_binary",
]


@dataclass(frozen=True, slots=True)
class Component:
    """One kube binary: its name on PATH, its setting, and what its absence means."""

    executable: str
    """The binary's name on PATH, also the component's name in ``kubernetes_status``."""
    setting: Setting[str]
    """``[plugins.kubernetes]`` key naming its path."""
    without: str
    """What the node does without it, after "<executable> not found: "."""

    @property
    def absent_note(self) -> str:
        """The note of its runnable when it is not found."""
        return f"{self.executable} not found: {self.without}"

    @property
    def install_hint(self) -> str:
        """What to do to have it, for error messages."""
        return f'set `{self.setting.name} = "/path"` in [plugins.kubernetes] or install it'


def _setting(name: str, executable: str) -> Setting[str]:
    return Setting(
        name,
        str,
        "",
        f"The {executable} binary; empty: {executable} on PATH. Not found: its runnable "
        "says so in its note and is not healthy (NEW).",
    )


APISERVER = Component(
    "kube-apiserver",
    _setting("kube_apiserver", "kube-apiserver"),
    "set [plugins.kubernetes] kube_apiserver or install it",
)
CONTROLLER_MANAGER = Component(
    "kube-controller-manager",
    _setting("kube_controller_manager", "kube-controller-manager"),
    "set [plugins.kubernetes] kube_controller_manager or install it",
)
SCHEDULER = Component(
    "kube-scheduler",
    _setting("kube_scheduler", "kube-scheduler"),
    "set [plugins.kubernetes] kube_scheduler or install it",
)
KUBELET = Component("kubelet", _setting("kubelet", "kubelet"), "container runtime only")

KUBE_PROXY = Component(
    "kube-proxy",
    _setting("kube_proxy", "kube-proxy"),
    "no Service is reachable from this node; set [plugins.kubernetes] kube_proxy or "
    "install it (./dev kube-binaries builds it)",
)

COMPONENTS = (APISERVER, CONTROLLER_MANAGER, SCHEDULER, KUBELET, KUBE_PROXY)
"""Every kube binary the plugin runs, controller's first."""

BUILT_DIR: Setting[str] = Setting(
    "kube_binaries_dir",
    str,
    "",
    "Where the kube binaries built by `./dev kube-binaries` are looked for, after the "
    "per-binary settings and before PATH; empty: the pinned version's build cache "
    "(${XDG_CACHE_HOME:-~/.cache}/roleserve/kube/<version>-<digest>/bin).",
)

SETTINGS: tuple[Setting[str], ...] = (
    *(component.setting for component in COMPONENTS),
    BUILT_DIR,
)
"""The ``[plugins.kubernetes]`` keys naming the binaries."""


@dataclass(frozen=True, slots=True)
class KubeBinaries:
    """The configured paths of the kube binaries (empty: look on PATH)."""

    configured: Mapping[str, str]
    """Executable name → configured path, for those set in the section."""
    built: Path | None = None
    """The directory of built binaries (``kube_binaries_dir``); None: the pinned build's."""

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> KubeBinaries:
        """The paths the plugin's ``NodeContext.config`` names (types checked by the core)."""
        found = {c.executable: c.setting.read(config) for c in COMPONENTS}
        built = BUILT_DIR.read(config)
        return cls(
            {name: path for name, path in found.items() if path},
            Path(built) if built else None,
        )

    def find(self, component: Component, search_path: str | None = None) -> Path | None:
        """The binary of ``component``, or None if there is none (see ``find_binary``)."""
        configured = self.configured.get(component.executable)
        return find_binary(component, configured, search_path, self.built)


def find_binary(
    component: Component,
    configured: str | None,
    search_path: str | None = None,
    built: Path | None = None,
) -> Path | None:
    """The binary of ``component``: ``configured`` if set (and only it), else the pinned
    build's in ``built`` (default ``kubebuild.pinned_bin_dir()``, where ``./dev
    kube-binaries`` puts them), else the one on PATH; None when none of them has it (the
    note's case).

    The pinned build comes before PATH because it is the version the plugin's plans are
    made for (``plugins/kubernetes/README.md``, which Kubernetes); PATH is for a machine
    that installs the binaries some other way.

    A configured path is returned as it is, even if it is missing or not executable: the
    operator named it, so starting it fails with the runner's final error naming the path
    and why (a DEAD runnable with the reason), rather than hiding the mistake behind
    "not found".
    """
    if configured:
        return Path(configured)
    pinned = (built or pinned_bin_dir()) / component.executable
    if os.access(pinned, os.X_OK):
        return pinned
    spec = ProgramSpec(
        name=component.executable,
        executable=component.executable,
        state_dir=Path("/nonexistent"),  # not started: only looked up
    )
    try:
        return resolve_binary(spec, search_path)
    except ProgramNotFoundError:
        return None
