"""The installed version of roleserve-core, for ``--version`` and ``roleserve plugins``."""

from __future__ import annotations

__all__ = ["CORE_DISTRIBUTION", "core_version"]

CORE_DISTRIBUTION = "roleserve-core"


def core_version() -> str:
    """The installed version, or ``0+unknown`` when run from a source tree not installed."""
    import importlib.metadata  # here: its import costs more than the interpreter's start

    try:
        return importlib.metadata.version(CORE_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
