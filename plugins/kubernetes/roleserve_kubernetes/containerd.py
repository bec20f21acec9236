"""Runnable ``containerd`` (``root.role.kubernetes_worker.containerd``): containerd with
CRI, its sandbox image imported, as a child program of the node.

Reads ``node_id`` (the pods' bridge's name), ``network`` (the metrics address: the node's
loopback address when it has one) and ``pod_network`` (a new prefix restarts it);
writes ``<data_dir>/containerd/``, the sandbox image, and its sockets
``<runtime_dir>/containerd.sock{,.ttrpc}`` (``layout``).

::

    socket path fits containerd? ───── no: SocketPathError (final, names the path)
    sandbox image built (busybox) ──── no busybox: SandboxImageError (final)
    leftovers of a killed run: shims of this socket killed, mounts under root/state
        undone, the pods' bridge deleted
    config.toml written (containerd_config)
    start_program: [nsenter --net=NETNS] containerd --config config.toml
        (dies with the node; its stderr, logfmt, into the log tree; missing binary: final)
        CRI Status over the socket until RuntimeReady (RuntimeNotReadyError after 60 s)
        images imported unless CRI has each (ctr -n k8s.io image import): the sandbox
            image, and the busybox image for pods (BUSYBOX_IMAGE)
        a container started and removed (runtimecheck: ctr run in a containerd namespace
            of its own; RuntimeCannotRunError with runc's error if it cannot)
        healthy; then until containerd exits (ProgramExitedError with its last errors),
        or until pod_network changes to another prefix (PodPrefixChangedError: expected,
        restarted after the backoff, so no pod keeps an address of the old prefix and the
        bridge gets the new gateway)
    on the way out (role removed, node stopping, containerd died), shielded:
        every pod sandbox stopped and removed over CRI (CNI releases addresses)
        containerd stopped (SIGTERM, grace, SIGKILL to its group)
        shims and their containers killed, mounts under root/state undone, the pods'
        bridge deleted (leftovers)

Readiness is judged on this node's socket, in this node's runtime directory (keyed by its
data directory, ``roleserve_core.rundir``), which no other node uses and whose earlier
owner (a killed run's containerd) the runner has stopped.
``netns`` (tests, benchmarks) runs containerd in a network namespace through ``nsenter
--net``, which changes nothing else (``ip netns exec`` would remount ``/sys``, hiding the
cgroup file systems runc needs).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import anyio
import anyio.to_thread
import grpc.aio

from roleserve_core import (
    NODE_ID,
    Bind,
    PluginValues,
    ProgramNotFoundError,
    ProgramSpec,
    RunContext,
    naming_full_disk,
    resolve_binary,
    start_program,
)
from roleserve_kubernetes.cni import bridge_name
from roleserve_kubernetes.containerd_config import ContainerdConfig, containerd_toml
from roleserve_kubernetes.cri import CriClient
from roleserve_kubernetes.errors import ImageImportError, PodPrefixChangedError
from roleserve_kubernetes.image import SANDBOX_IMAGE, OciArchive, build_sandbox_image
from roleserve_kubernetes.layout import WorkerLayout, check_socket_path
from roleserve_kubernetes.leftovers import remove_leftovers
from roleserve_kubernetes.runtimecheck import prove_runtime
from roleserve_kubernetes.settings import (
    CONTAINERD_EXECUTABLE,
    CONTAINERD_INSTALL_HINT,
    WorkerSettings,
    metrics_address,
)
from roleserve_kubernetes.values import POD_NETWORK, PodNetwork

__all__ = [
    "REMOVE_PODS_TIMEOUT",
    "containerd",
    "containerd_spec",
    "find_containerd",
    "find_ctr",
    "images_missing",
    "import_image",
    "metrics_address",
    "parse_containerd_log",
    "prepare_image",
    "wait_prefix_change",
]

REMOVE_PODS_TIMEOUT = 30.0
"""Seconds the pods may take to stop and be removed before containerd is stopped anyway
(the leftovers' removal then kills what is left)."""

STOP_GRACE = 10.0
"""Seconds containerd may take to stop after SIGTERM."""

_LOGFMT = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')
_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.DEBUG,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
    "panic": logging.CRITICAL,
}

_STOPPED_SERVER = "the server has been stopped"
"""grpc-go's ``ErrServerStopped``. containerd's listeners log it as ``fatal`` "serve
failure" when SIGTERM stops the gRPC server before its serving goroutine has returned: a
race in containerd's shutdown (cmd/containerd/command/main.go), not a crash."""


def parse_containerd_log(line: str) -> tuple[int, str]:
    """containerd's logfmt lines (``time=... level=info msg="..." key=value``).

    ``info`` goes to DEBUG: containerd lists every plugin it loads at info. The message is
    ``msg`` then the other fields; the time is left out (the log tree has its own). A line
    that is not logfmt (``containerd: failed to load TOML: ...`` before its logger runs)
    is logged as it is, at ERROR, so that it becomes the error when containerd exits.
    A ``fatal`` "serve failure" whose error is that the server has been stopped is
    containerd stopping as asked (see ``_STOPPED_SERVER``): INFO, not CRITICAL.
    """
    fields = dict(_LOGFMT.findall(line))
    if "level" not in fields or "msg" not in fields:
        return logging.ERROR, line
    unquoted = {
        key: value[1:-1].replace('\\"', '"') if value.startswith('"') else value
        for key, value in fields.items()
    }
    level = _LEVELS.get(unquoted.pop("level"), logging.INFO)
    message = unquoted.pop("msg")
    if message == "serve failure" and _STOPPED_SERVER in unquoted.get("error", ""):
        level = logging.INFO
    unquoted.pop("time", None)
    details = " ".join(f"{key}={value}" for key, value in unquoted.items())
    return level, f"{message} {details}".strip()


def find_containerd(settings: WorkerSettings) -> Path:
    """The containerd binary: configured, else on PATH.

    :raises ProgramNotFoundError: none, naming the paths tried and the setting (final).
    """
    return resolve_binary(
        ProgramSpec(
            name="containerd",
            executable=CONTAINERD_EXECUTABLE,
            configured=settings.containerd or None,
            setting=CONTAINERD_INSTALL_HINT,
            state_dir=Path("/"),
        )
    )


def containerd_spec(
    binary: Path, layout: WorkerLayout, metrics: str | None, netns: str | None = None
) -> ProgramSpec:
    """containerd (``binary``) with the generated configuration; in ``netns`` through
    ``nsenter``.

    :raises ProgramNotFoundError: ``netns`` given and no nsenter; final.
    """
    arguments = ["--config", str(layout.config)]
    binds = []
    if metrics is not None and netns is None:
        host, _, port = metrics.rpartition(":")
        binds.append(Bind(host.strip("[]"), int(port)))
    spec = ProgramSpec(
        name="containerd",
        executable=str(binary),
        setting=CONTAINERD_INSTALL_HINT,
        arguments=arguments,
        state_dir=layout.directory,
        binds=binds,
        parser=parse_containerd_log,
        stop_grace=STOP_GRACE,
    )
    if netns is None:
        return spec
    nsenter = shutil.which("nsenter")
    if nsenter is None:
        raise ProgramNotFoundError(
            "cannot start containerd in a network namespace: no nsenter (util-linux)"
        )
    return replace(
        spec,
        executable=nsenter,
        arguments=[f"--net=/var/run/netns/{netns}", "--", str(binary), *arguments],
    )


def prepare_image(settings: WorkerSettings, layout: WorkerLayout) -> OciArchive:
    """Build the sandbox image and write it (only if it changed); blocking.

    :raises SandboxImageError: no busybox (final).
    """
    busybox = Path(settings.busybox)
    try:
        listed = subprocess.run(
            [str(busybox), "--list"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.split()
    except OSError:
        listed = []  # build_sandbox_image names the missing file
    archive = build_sandbox_image(busybox, listed)
    try:
        unchanged = layout.image_tar.read_bytes() == archive.data
    except OSError:
        unchanged = False
    if not unchanged:
        with naming_full_disk(layout.image_tar):
            layout.image_tar.write_bytes(archive.data)
    return archive


def find_ctr(settings: WorkerSettings, containerd_binary: Path) -> Path:
    """ctr: configured, else on PATH, else next to containerd.

    :raises ProgramNotFoundError: none of them (final).
    """
    return resolve_binary(
        ProgramSpec(
            name="ctr",
            executable="ctr",
            configured=settings.ctr or None,
            fallbacks=[containerd_binary.parent / "ctr"],
            setting='set `ctr = "/path"` in [plugins.kubernetes] of roleserve.toml',
            state_dir=Path("/"),
        )
    )


async def images_missing(cri: CriClient, images: Mapping[str, str]) -> list[str]:
    """The ``images`` (an archive's: reference → ID) that CRI does not have as built."""
    missing = []
    for name, image_id in images.items():
        image = await cri.image_status(name)
        if image is None or image.id != image_id:
            missing.append(name)
    return missing


async def import_image(
    log: logging.Logger, ctr: Path, settings: WorkerSettings, layout: WorkerLayout
) -> None:
    """``ctr -n k8s.io image import`` of the image archive (the sandbox image and
    ``BUSYBOX_IMAGE``) into CRI's namespace.

    :raises ImageImportError: ctr failed, with its output.
    """
    command = [
        str(ctr),
        "--address",
        str(layout.socket),
        "--namespace",
        "k8s.io",
        "image",
        "import",
        "--snapshotter",
        settings.snapshotter,
        str(layout.image_tar),
    ]
    result = await anyio.run_process(command, check=False)
    output = (result.stderr or result.stdout).decode(errors="replace").strip()
    if result.returncode != 0:
        raise ImageImportError(
            f"cannot import the sandbox image {layout.image_tar}: ctr exited with status "
            f"{result.returncode}: {output.splitlines()[-1] if output else 'no output'}"
        )
    log.info("imported the images of %s", layout.image_tar)


async def containerd(
    ctx: RunContext,
    values: PluginValues,
    settings: WorkerSettings,
    layout: WorkerLayout,
    netns: str | None = None,
) -> None:
    """Runs containerd with CRI for this node's pods; see the module docstring."""
    check_socket_path(layout.socket)
    with values.watch(NODE_ID) as ids:
        bridge = bridge_name(await ids.get())
    metrics = metrics_address(values, settings)
    binary = find_containerd(settings)
    spec = containerd_spec(binary, layout, metrics, netns)
    ctr = find_ctr(settings, binary)
    # Only the images' IDs are kept: the archive's bytes (the busybox in it, ~2 MiB) are
    # on disk, and held here they would weigh on the node for as long as containerd runs.
    images = (await anyio.to_thread.run_sync(prepare_image, settings, layout)).images
    directories = (layout.root, layout.state)
    await remove_leftovers(layout.socket, directories, ctx.log, bridge, netns)
    toml = containerd_toml(
        ContainerdConfig(layout, SANDBOX_IMAGE, settings.cni_bin_dir, settings.snapshotter, metrics)
    )
    layout.containerd_dir.mkdir(parents=True, exist_ok=True)
    with naming_full_disk(layout.config):
        layout.config.write_text(toml)
    try:
        async with start_program(ctx.log, spec) as program, CriClient(layout.socket) as cri:
            ctx.set_note(f"waiting for containerd's CRI (pid {program.pid})")
            await cri.wait_runtime_ready()
            if await images_missing(cri, images):
                await import_image(ctx.log, ctr, settings, layout)
            ctx.set_note(f"starting a container to prove runc works (pid {program.pid})")
            await prove_runtime(ctx.log, ctr, layout.socket, layout.image_tar, settings.snapshotter)
            ctx.set_note(f"containerd running, pid {program.pid}, socket {layout.socket}")
            ctx.signal_healthy()
            try:
                # Returns when the prefix changes; cancelled if containerd exits.
                old, new = await wait_prefix_change(values)
                raise PodPrefixChangedError(
                    f"this node's pod prefix changed from {_prefixes(old)} to "
                    f"{_prefixes(new)}; restarting containerd without the old pods and "
                    "their bridge"
                )
            finally:
                with anyio.CancelScope(shield=True):
                    await _remove_pods(ctx.log, cri)
    finally:
        with anyio.CancelScope(shield=True):
            await remove_leftovers(layout.socket, directories, ctx.log, bridge, netns)


def _prefixes(pods: PodNetwork) -> str:
    return ", ".join(str(prefix) for prefix in pods.prefixes)


async def wait_prefix_change(values: PluginValues) -> tuple[PodNetwork, PodNetwork]:
    """Wait until ``pod_network`` holds prefixes other than the first it held; (old, new).

    Unset or empty at first is no prefix yet: CRI starts no pod before the CNI
    configuration exists, so the first prefix is never a change."""
    first: PodNetwork | None = None
    with values.watch(POD_NETWORK) as pods:
        async for current in pods:
            if not current.prefixes:
                continue
            if first is None:
                first = current
            elif current != first:
                return first, current
    raise AssertionError("unreachable: a watch ends only when cancelled")  # pragma: no cover


async def _remove_pods(log: logging.Logger, cri: CriClient) -> None:
    """Every pod stopped and removed, within ``REMOVE_PODS_TIMEOUT``; failures logged."""
    with anyio.move_on_after(REMOVE_PODS_TIMEOUT) as scope:
        try:
            removed = await cri.remove_all_pods()
        except grpc.aio.AioRpcError as exc:
            log.warning("cannot remove the pods before stopping containerd: %s", exc.details())
            return
        if removed:
            log.info("stopped and removed %d pod sandbox(es)", removed)
    if scope.cancelled_caught:
        log.warning("the pods did not stop within %ss; killing them", REMOVE_PODS_TIMEOUT)
