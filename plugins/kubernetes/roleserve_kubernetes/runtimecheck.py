"""Proving that containerd can start a container, before the worker says it is healthy.

CRI's ``Status`` says ``RuntimeReady`` as soon as containerd runs; it never asks runc to
start anything. A runc that cannot (no cgroup file system in its mount namespace, "no
cgroup mount found in mountinfo"; a broken binary) left containerd HEALTHY while no pod
could ever run. So, at every start of containerd, after the images are imported::

    ctr -n roleserve-runtime-check containers ls -q ──▶ a killed check's container: rm
    ctr -n roleserve-runtime-check image import <the image archive>   (a no-op once there)
    ctr -n roleserve-runtime-check run --rm --null-io <SANDBOX_IMAGE> check-<random>
        /bin/busybox true
        exit 0 ──▶ proved
        anything else (runc's error, a status, no end within CHECK_TIMEOUT)
            ──▶ RuntimeCannotRunError, its one line the reason (ctr's last line)

Decisions:

- **ctr, not CRI**: a CRI sandbox needs the pod network (CNI), which a node without its
  prefix yet does not have; containerd without a network is still a runtime. ``ctr run``
  gives the container a network namespace of its own with nothing in it, and runc does
  everything a pod's container needs of it (namespaces, cgroups, the rootfs mount).
- **A containerd namespace of its own** (``CHECK_NAMESPACE``), not CRI's ``k8s.io``: the
  kubelet never sees the check, and the check never touches a pod. Its images share the
  content store with ``k8s.io``'s; the import only records them and unpacks the one layer
  into a snapshot of the namespace's own, once.
- **The same runc as pods**: ctr names no runtime binary, so the shim runs ``runc`` from
  containerd's ``PATH``, as it does for CRI's containers (``containerd_config`` sets no
  ``BinaryName``).
- **Cheap**: three ``ctr`` runs (four after a killed check) and one shim, 0.2 to 0.3 s
  on a loaded 2-core machine; a random container ID (its cgroup is ctr's
  ``/<namespace>/<ID>``, so two nodes of one machine never share one; the namespace's
  directory stays, empty), removed by ``--rm``; what a killed check left is removed by the
  next.
"""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path

import anyio

from roleserve_kubernetes.errors import RuntimeCannotRunError
from roleserve_kubernetes.image import SANDBOX_IMAGE

__all__ = ["CHECK_COMMAND", "CHECK_NAMESPACE", "CHECK_TIMEOUT", "prove_runtime"]

CHECK_NAMESPACE = "roleserve-runtime-check"
"""The containerd namespace of the check's image and container."""

CHECK_COMMAND = ("/bin/busybox", "true")
"""What the check's container runs."""

CHECK_TIMEOUT = 60.0
"""Seconds the whole check may take (it takes well under one; a loaded machine, more)."""


async def prove_runtime(
    log: logging.Logger, ctr: Path, socket: Path, image_tar: Path, snapshotter: str
) -> None:
    """Start a container of the sandbox image through containerd at ``socket``, and see it
    exit 0; see the module docstring.

    :raises RuntimeCannotRunError: it cannot, with the reason in one line.
    """
    base = [str(ctr), "--address", str(socket), "--namespace", CHECK_NAMESPACE]
    started = time.monotonic()
    with anyio.move_on_after(CHECK_TIMEOUT):
        listed = await _ctr([*base, "containers", "ls", "-q"], "list its containers")
        if stale := listed.split():
            log.info("removing %d container(s) of a runtime check cut short", len(stale))
            await _ctr([*base, "containers", "rm", *stale], "remove a check cut short")
        await _ctr(
            [*base, "image", "import", "--snapshotter", snapshotter, str(image_tar)],
            f"import {image_tar}",
        )
        name = f"check-{secrets.token_hex(4)}"
        await _ctr(
            [*base, "run", "--rm", "--null-io", "--snapshotter", snapshotter,
             SANDBOX_IMAGE, name, *CHECK_COMMAND],
            "start a container",
        )  # fmt: skip
        took = time.monotonic() - started
        log.info("proved the runtime: started and removed the container %s (%.2f s)", name, took)
        return
    raise RuntimeCannotRunError(
        f"containerd cannot start a container: the check ({' '.join(CHECK_COMMAND)} in "
        f"{SANDBOX_IMAGE}, containerd namespace {CHECK_NAMESPACE}) did not end within "
        f"{CHECK_TIMEOUT:g} s"
    )


async def _ctr(command: list[str], what: str) -> str:
    """Run ctr; its standard output.

    :raises RuntimeCannotRunError: it failed: its last line of error, or its status.
    """
    done = await anyio.run_process(command, check=False)
    if done.returncode == 0:
        return done.stdout.decode(errors="replace")
    lines = done.stderr.decode(errors="replace").strip().splitlines()
    reason = lines[-1].removeprefix("ctr: ") if lines else f"ctr exited with {done.returncode}"
    raise RuntimeCannotRunError(
        f"containerd cannot start a container: the check could not {what} "
        f"(containerd namespace {CHECK_NAMESPACE}): {reason}"
    )
