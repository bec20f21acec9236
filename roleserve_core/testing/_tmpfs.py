"""A small filesystem of its own for disk-space tests: a tmpfs, filled and freed on demand.

A tmpfs of a given size is the one way to run out of disk space for real without touching
the host's disks; etcd's ``fallocate`` and the node's writes meet it exactly as a full disk.
Mounting needs root (or a user namespace that permits it): where it is refused, the test is
skipped with the reason (``require_real``: failed instead under ``ROLESERVE_REQUIRE_REAL=1``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from roleserve_core.testing._real import require_real

__all__ = ["Tmpfs", "mounted_tmpfs"]

_FILLER = ".tmpfs-filler"


@dataclass(frozen=True)
class Tmpfs:
    """A mounted tmpfs at ``path``."""

    path: Path

    @property
    def free(self) -> int:
        """Bytes still free."""
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Take all its free space but ``leave`` bytes (in a file of its own, which
        ``release`` removes); tmpfs allocates a page at a time, so a few KiB may stay."""
        with (self.path / _FILLER).open("ab") as filler:
            wanted = self.free - leave
            if wanted <= 0:
                return
            try:
                os.posix_fallocate(filler.fileno(), filler.tell(), wanted)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise

    def release(self) -> None:
        """Give back what ``fill`` took."""
        (self.path / _FILLER).unlink(missing_ok=True)


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: int) -> Iterator[Tmpfs]:
    """Mount a tmpfs of ``size`` bytes at ``path`` (created if missing) for the block.

    Unmounted lazily at the end: a process of the test (etcd being stopped) may still hold a
    file there; the kernel frees the tmpfs once the last one closes.
    Skips the calling test where mounting is not permitted.
    """
    path.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)]
    try:
        result = subprocess.run(mount, capture_output=True, text=True, check=False)
        refusal = result.stderr.strip() if result.returncode else ""
    except OSError as exc:
        refusal = str(exc)
    require_real(
        "a tmpfs mount" + (f" ({refusal})" if refusal else ""),
        not refusal,
        "run the tests as root, or where mount(8) of a tmpfs is permitted",
    )
    try:
        yield Tmpfs(path)
    finally:
        subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)
