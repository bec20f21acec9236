"""Generate the Python code of the protobuf API: ``python -m roleserve_core.proto.generate``.

For each ``roleserve_core/proto/<name>.proto``, and each plugin's
``plugins/<plugin>/roleserve_<plugin>/proto/<name>.proto``, it writes, next to it:

- ``<name>_pb2.py`` and ``<name>_pb2.pyi``: the messages (protoc, with mypy-protobuf's
  stubs, which type every field);
- ``<name>_pb2_grpc.py`` and ``<name>_pb2_grpc.pyi``: the service stubs and servicers
  (grpcio-tools, with mypy-protobuf's stubs, which type the grpc.aio side too).

The generated files are committed, so a user needs neither protoc nor the plugins; the test
suite regenerates them into a temporary directory and fails on any difference, so they
cannot drift from the ``.proto`` files. ``--check`` does the same from the command line.

Needs the development dependencies (``./dev sync``): grpcio-tools and mypy-protobuf.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.resources
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PROTO_DIR", "REPOSITORY", "ProtoRoot", "generate", "main", "proto_files", "roots"]

PROTO_DIR = Path(__file__).resolve().parent
REPOSITORY = PROTO_DIR.parent.parent
"""The import root of the core's protos: ``import "roleserve_core/proto/common.proto"``."""


@dataclass(frozen=True)
class ProtoRoot:
    """A directory protos are imported relative to, and the protos under it."""

    root: Path
    """E.g. the repository for ``roleserve_core/proto``, ``plugins/controlplane`` for a
    plugin's ``roleserve_controlplane/proto``."""
    protos: tuple[Path, ...]


def roots() -> list[ProtoRoot]:
    """The core's protos, then each plugin's (``plugins/*/roleserve_*/proto/*.proto``)."""
    found = [ProtoRoot(REPOSITORY, tuple(sorted(PROTO_DIR.glob("*.proto"))))]
    for directory in sorted(REPOSITORY.glob("plugins/*/roleserve_*/proto")):
        plugin_root = directory.parent.parent
        found.append(ProtoRoot(plugin_root, tuple(sorted(directory.glob("*.proto")))))
    return [root for root in found if root.protos]


def proto_files() -> list[Path]:
    """Every ``.proto`` file the generator covers, core first."""
    return [proto for root in roots() for proto in root.protos]


def _plugin(name: str) -> str:
    """The path of a protoc plugin installed next to this Python (in the venv's bin)."""
    candidate = Path(sys.executable).parent / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found; install the development dependencies (./dev sync)")
    return found


def generate(output: Path) -> list[Path]:
    """Run protoc over every ``.proto`` file, writing the generated tree under ``output``
    as it lies in the repository (a plugin's code under ``plugins/<name>/...``).

    :returns: the generated files, relative to ``output``.
    """
    from grpc_tools import protoc  # type: ignore[import-untyped]  # dev dependency, no stubs

    includes = [str(importlib.resources.files("grpc_tools") / "_proto")]
    includes += [str(root.root) for root in roots()]
    for root in roots():
        destination = output / root.root.relative_to(REPOSITORY)
        destination.mkdir(parents=True, exist_ok=True)
        arguments = [
            "grpc_tools.protoc",
            *(f"--proto_path={include}" for include in [str(root.root), *includes]),
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={destination}",
            f"--grpc_python_out={destination}",
            f"--mypy_out=quiet:{destination}",
            f"--mypy_grpc_out=quiet:{destination}",
            *(str(proto.relative_to(root.root)) for proto in root.protos),
        ]
        cwd = os.getcwd()
        try:
            os.chdir(root.root)  # protoc records paths relative to where it runs
            status = protoc.main(arguments)
        finally:
            os.chdir(cwd)
        if status != 0:
            raise SystemExit(f"protoc failed with status {status} on {root.root}")
    return sorted(path.relative_to(output) for path in output.rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> int:
    """Regenerate the committed code, or with ``--check`` only compare; exit 1 on a difference."""
    parser = argparse.ArgumentParser(
        prog="python -m roleserve_core.proto.generate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        generated = generate(Path(scratch))
        stale = [
            path
            for path in generated
            if not (REPOSITORY / path).exists()
            or not filecmp.cmp(Path(scratch) / path, REPOSITORY / path, shallow=False)
        ]
        if args.check:
            for path in stale:
                print(f"out of date: {path}", file=sys.stderr)
            return 1 if stale else 0
        for path in stale:
            shutil.copyfile(Path(scratch) / path, REPOSITORY / path)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
