"""Writing files that must never be seen half-written, with the mode they need."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place.

    A crash leaves either the old file or the new one, never a mix. The file gets ``mode``
    even if it existed with another (a key file once 0644 becomes 0600), and its contents
    are on disk (fsync) before the rename.
    """
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with open(descriptor, "wb") as file:
        os.fchmod(file.fileno(), mode)  # an existing temporary file keeps its old mode
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
