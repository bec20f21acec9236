"""containerd's files on a full disk (issue 28): one line naming the file and its filesystem,
not a traceback (a real tmpfs, filled)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roleserve_core import DiskFullError
from roleserve_core.testing import mounted_tmpfs
from roleserve_kubernetes.containerd import prepare_image
from roleserve_kubernetes.layout import WorkerLayout
from roleserve_kubernetes.settings import WorkerSettings


def test_the_sandbox_image_on_a_full_disk_names_it(tmp_path: Path) -> None:
    busybox = tmp_path / "busybox"  # any file: the image holds its bytes
    busybox.write_bytes(bytes(256 * 1024))
    with mounted_tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        layout = WorkerLayout(disk.path / "kubernetes", tmp_path / "run")
        layout.image_tar.parent.mkdir(parents=True, exist_ok=True)
        disk.fill()
        with pytest.raises(DiskFullError) as full:
            prepare_image(WorkerSettings(busybox=str(busybox)), layout)
    assert str(full.value) == (
        f"no space left on the filesystem mounted at {disk.path} (writing {layout.image_tar}): "
        "No space left on device; free space there, and this starts again by itself"
    )
