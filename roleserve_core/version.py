"""The installed version of roleserve-core, for ``--version`` and ``roleserve plugins``."""

from __future__ import annotations

import importlib.metadata

__all__ = ["CORE_DISTRIBUTION", "core_version"]

CORE_DISTRIBUTION = "roleserve-core"


def core_version() -> str:
    """The installed version, or ``0+unknown`` when run from a source tree not installed."""
    try:
        return importlib.metadata.version(CORE_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
