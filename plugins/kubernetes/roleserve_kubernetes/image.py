"""The sandbox image: one layer holding a static busybox, built here, imported at start.

CRI needs an image for each pod's sandbox ("pause") container, and containerd would pull
``registry.k8s.io/pause`` from the network. No registry is needed: Debian's static
``/bin/busybox`` is a whole userland in one file, and an OCI image of it is a few lines
of ``tarfile``, ``json`` and ``hashlib``::

    busybox + its applet names ──layer_tar──▶ bin/busybox, bin/<applet> → busybox
        ──oci_archive──▶ oci-layout, index.json (SANDBOX_IMAGE, BUSYBOX_IMAGE),
                         blobs/sha256/... (one layer, a config and a manifest per image)
        ──ctr -n k8s.io image import──▶ containerd's k8s.io namespace (CRI's)

The archive is byte-for-byte the same for the same busybox (no times, no owners), so its
digest names the busybox it holds, and an import of an image containerd has is a no-op.
The sandbox runs ``sleep`` for ever. The same layer is also ``BUSYBOX_IMAGE``, the image
pods run without a registry (``imagePullPolicy: IfNotPresent``): it runs what the pod says,
``sh`` if nothing, as Docker Hub's ``busybox`` does. It is an image of its own (a config and
a manifest of a few hundred bytes, the layer shared) rather than a second name of the
sandbox image, whose entrypoint would put ``sleep`` before a pod's ``args``.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from roleserve_kubernetes.errors import SandboxImageError

__all__ = [
    "BUSYBOX_COMMAND",
    "BUSYBOX_IMAGE",
    "SANDBOX_COMMAND",
    "SANDBOX_IMAGE",
    "OciArchive",
    "OciImage",
    "build_sandbox_image",
    "layer_tar",
    "oci_archive",
]

SANDBOX_IMAGE = "roleserve.local/sandbox:busybox"
"""The image's reference in containerd, and the CRI plugin's ``sandbox_image``."""

SANDBOX_COMMAND = ("/bin/busybox", "sleep", "2147483647")
"""What a sandbox runs: nothing, for as long as the pod lives (CRI kills it)."""

BUSYBOX_IMAGE = "roleserve.local/busybox:latest"
"""The busybox image for pods: a pod's ``command`` and ``args`` run as they are."""

BUSYBOX_COMMAND = ("sh",)
"""What ``BUSYBOX_IMAGE`` runs when a pod says nothing (its ``Cmd``; it has no
``Entrypoint``)."""

_GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}
_OCI = "application/vnd.oci.image"


@dataclass(frozen=True)
class OciArchive:
    """A built archive: its bytes and the digests that name it."""

    data: bytes
    manifest_digest: str
    """``sha256:<hex>``: what containerd records as the (first) image's target."""
    config_digest: str
    """``sha256:<hex>``: the (first) image's ID, as CRI's ImageStatus reports it."""
    images: Mapping[str, str] = field(default_factory=dict)
    """Every image the archive holds: its reference → its ID (``config_digest``)."""


@dataclass(frozen=True)
class OciImage:
    """An image of an archive besides its first: its reference and what it runs (the
    config's ``Entrypoint`` and ``Cmd``; empty: none)."""

    name: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()


def layer_tar(busybox: bytes, applets: Sequence[str]) -> bytes:
    """An uncompressed layer: ``bin/busybox`` and a symbolic link per applet, reproducible
    (every time and owner zero)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("bin", "tmp"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(busybox), 0o755
        tar.addfile(info, io.BytesIO(busybox))
        for applet in sorted(set(applets) - {"busybox"}):
            if not applet or "/" in applet:
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, "busybox", 0o777
            tar.addfile(link)
    return out.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    """Add ``data`` as a blob; return its digest."""
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    info = tarfile.TarInfo(f"blobs/sha256/{digest.removeprefix('sha256:')}")
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))
    return digest


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def oci_archive(
    layer: bytes,
    name: str,
    command: Sequence[str],
    arch: str = "",
    *,
    also: Sequence[OciImage] = (),
) -> OciArchive:
    """An OCI image layout, as a tar ``ctr image import`` reads, of images of ``layer``:
    the first under the reference ``name``, running ``command`` (its entrypoint), then
    each of ``also``."""
    arch = arch or _GOARCH.get(platform.machine(), platform.machine())
    images = [OciImage(name, entrypoint=tuple(command)), *also]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        layer_digest = _blob(tar, layer)
        made = [_image(tar, image, layer_digest, len(layer), arch) for image in images]
        index = _json(
            {
                "schemaVersion": 2,
                "mediaType": f"{_OCI}.index.v1+json",
                "manifests": [descriptor for descriptor, _, _ in made],
            }
        )
        for file_name, data in (
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
            ("index.json", index),
        ):
            info = tarfile.TarInfo(file_name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    [(_, manifest_digest, config_digest), *_] = made
    ids = {image.name: config for image, (_, _, config) in zip(images, made, strict=True)}
    return OciArchive(out.getvalue(), manifest_digest, config_digest, ids)


def _image(
    tar: tarfile.TarFile, image: OciImage, layer_digest: str, layer_size: int, arch: str
) -> tuple[dict[str, object], str, str]:
    """Add ``image``'s config and manifest (of the one layer) as blobs; its index entry,
    manifest digest and config digest."""
    runs: dict[str, object] = {"Entrypoint": list(image.entrypoint)} if image.entrypoint else {}
    if image.cmd:
        runs["Cmd"] = list(image.cmd)
    config = _json(
        {
            "architecture": arch,
            "os": "linux",
            "config": {**runs, "Env": ["PATH=/bin"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
    )
    config_digest = _blob(tar, config)
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": f"{_OCI}.manifest.v1+json",
            "config": {
                "mediaType": f"{_OCI}.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [
                {"mediaType": f"{_OCI}.layer.v1.tar", "digest": layer_digest, "size": layer_size}
            ],
        }
    )
    manifest_digest = _blob(tar, manifest)
    descriptor: dict[str, object] = {
        "mediaType": f"{_OCI}.manifest.v1+json",
        "digest": manifest_digest,
        "size": len(manifest),
        "platform": {"architecture": arch, "os": "linux"},
        "annotations": {
            "io.containerd.image.name": image.name,
            "org.opencontainers.image.ref.name": image.name.rpartition(":")[2],
        },
    }
    return descriptor, manifest_digest, config_digest


def build_sandbox_image(busybox: Path, applets: Sequence[str]) -> OciArchive:
    """The sandbox image of the static busybox at ``busybox``, and ``BUSYBOX_IMAGE`` of the
    same layer.

    :param applets: the names it answers to (``busybox --list``), linked in ``/bin``.
    :raises SandboxImageError: it cannot be read (final: the operator installs it).
    """
    try:
        data = busybox.read_bytes()
    except OSError as exc:
        raise SandboxImageError(
            f"cannot build the sandbox image: {busybox}: {exc.strerror or exc}; "
            'apt-get install busybox-static, or set `busybox = "/path"` in '
            "[plugins.kubernetes] of roleserve.toml"
        ) from None
    pods = OciImage(BUSYBOX_IMAGE, cmd=BUSYBOX_COMMAND)
    return oci_archive(layer_tar(data, applets), SANDBOX_IMAGE, SANDBOX_COMMAND, also=[pods])
