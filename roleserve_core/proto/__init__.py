"""The wire API: the protos and the Python modules generated from them (committed).

Each ``<name>_pb2`` / ``<name>_pb2_grpc`` module is imported on first use, so that
``roleserve_core.proto.curator_pb2`` (and ``roleserve_core.curator_pb2``, the plugin API's
name for it) costs nothing until a plugin calls the curator.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def __getattr__(name: str) -> ModuleType:
    """A generated module, imported on first use."""
    if not name.endswith(("_pb2", "_pb2_grpc")):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
