"""The sandbox image: one layer holding a static busybox, built here, imported at start.

CRI needs an image for each pod's sandbox ("pause") container, and containerd would pull
``registry.k8s.io/pause`` from the network. No registry is needed: Debian's static
``/bin/busybox`` is a whole userland in one file, and an OCI image of it is a few lines
of ``tarfile``, ``json`` and ``hashlib``::

    busybox + its applet names ──layer_tar──▶ bin/busybox, bin/<applet> → busybox
        ──oci_archive──▶ oci-layout, index.json (named SANDBOX_IMAGE), blobs/sha256/...
        ──ctr -n k8s.io image import──▶ containerd's k8s.io namespace (CRI's)

The archive is byte-for-byte the same for the same busybox (no times, no owners), so its
digest names the busybox it holds, and an import of an image containerd has is a no-op.
The sandbox runs ``sleep`` for ever; the same image serves tests and benchmarks as a small
image with a shell.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roleserve_kubernetes.errors import SandboxImageError

__all__ = [
    "SANDBOX_COMMAND",
    "SANDBOX_IMAGE",
    "OciArchive",
    "build_sandbox_image",
    "layer_tar",
    "oci_archive",
]

SANDBOX_IMAGE = "roleserve.local/sandbox:busybox"
"""The image's reference in containerd, and the CRI plugin's ``sandbox_image``."""

SANDBOX_COMMAND = ("/bin/busybox", "sleep", "2147483647")
"""What a sandbox runs: nothing, for as long as the pod lives (CRI kills it)."""

_GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}
_OCI = "application/vnd.oci.image"


@dataclass(frozen=True)
class OciArchive:
    """A built archive: its bytes and the digests that name it."""

    data: bytes
    manifest_digest: str
    """``sha256:<hex>``: what containerd records as the image's target."""
    config_digest: str
    """``sha256:<hex>``: the image's ID, as CRI's ImageStatus reports it."""


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


def oci_archive(layer: bytes, name: str, command: Sequence[str], arch: str = "") -> OciArchive:
    """An OCI image layout, as a tar ``ctr image import`` reads, of one image: ``layer``
    under the reference ``name``, running ``command``."""
    arch = arch or _GOARCH.get(platform.machine(), platform.machine())
    layer_digest = f"sha256:{hashlib.sha256(layer).hexdigest()}"
    config = _json(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Entrypoint": list(command), "Env": ["PATH=/bin"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
    )
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _blob(tar, layer)
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
                    {
                        "mediaType": f"{_OCI}.layer.v1.tar",
                        "digest": layer_digest,
                        "size": len(layer),
                    }
                ],
            }
        )
        manifest_digest = _blob(tar, manifest)
        index = _json(
            {
                "schemaVersion": 2,
                "mediaType": f"{_OCI}.index.v1+json",
                "manifests": [
                    {
                        "mediaType": f"{_OCI}.manifest.v1+json",
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "platform": {"architecture": arch, "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rpartition(":")[2],
                        },
                    }
                ],
            }
        )
        for file_name, data in (
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
            ("index.json", index),
        ):
            info = tarfile.TarInfo(file_name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return OciArchive(out.getvalue(), manifest_digest, config_digest)


def build_sandbox_image(busybox: Path, applets: Sequence[str]) -> OciArchive:
    """The sandbox image of the static busybox at ``busybox``.

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
    return oci_archive(layer_tar(data, applets), SANDBOX_IMAGE, SANDBOX_COMMAND)
