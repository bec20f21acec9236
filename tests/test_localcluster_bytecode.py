"""Where a local cluster's nodes cache their bytecode: where this process's environment says
to write none (``PYTHONDONTWRITEBYTECODE``, as in many container images), each node
compiled every module it imported at every start; they share one cache in the cluster's
directory instead."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path

import pytest

from roleserve_core.localcluster.process import BYTECODE_DIRECTORY, LocalNode


def node_in(cluster: Path, index: int) -> LocalNode:
    return LocalNode(index, ipaddress.IPv4Address(f"127.0.0.{10 + index}"), cluster / f"n{index}")


def cached_after_an_import(node: LocalNode) -> list[Path]:
    """The bytecode files under the cluster's cache once a Python run with the node's
    environment imported a module."""
    subprocess.run(
        [sys.executable, "-c", "import email.mime.text"], env=node._environment(), check=True
    )
    return sorted((node.directory.parent / BYTECODE_DIRECTORY).rglob("*.pyc"))


def test_nodes_share_one_bytecode_cache_where_none_would_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    first = cached_after_an_import(node_in(tmp_path, 1))
    assert any(path.name.startswith("text.") for path in first)
    environment = node_in(tmp_path, 2)._environment()
    assert environment["PYTHONPYCACHEPREFIX"] == str(tmp_path / BYTECODE_DIRECTORY)
    assert "PYTHONDONTWRITEBYTECODE" not in environment


@pytest.mark.parametrize("setting", ["unset", "prefix"])
def test_the_environment_is_kept_where_bytecode_is_written_or_placed_already(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    if setting == "prefix":
        monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
        monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "elsewhere"))
    else:
        monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    environment = node_in(tmp_path, 1)._environment()
    if setting == "prefix":
        assert environment["PYTHONPYCACHEPREFIX"] == str(tmp_path / "elsewhere")
        assert environment["PYTHONDONTWRITEBYTECODE"] == "1"
    else:
        assert "PYTHONPYCACHEPREFIX" not in environment
        assert "PYTHONDONTWRITEBYTECODE" not in environment
