"""``roleserve --version`` and every ``--help`` answer at once: they import none of grpc,
protobuf, cryptography, pluggy or anyio, which only the work behind a command needs.

(How long they take is measured by ``benchmarks/cli.py``; this checks the cause.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("grpc", "google.protobuf", "cryptography", "pluggy", "anyio")

PROBE = """
import json, sys
from roleserve_core.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = [name for name in {heavy!r} if name in sys.modules]
print(json.dumps(heavy), file=sys.stderr)
"""


def _heavy_modules_loaded(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["ctl", "--help"],
        ["ctl", "nodes", "--help"],
        ["ctl", "logs", "--help"],
        ["cluster", "--help"],
        ["cluster", "up", "--help"],
        ["node", "run", "--help"],
        ["plugins", "--help"],
        ["plugin", "new", "--help"],
    ],
    ids=" ".join,
)
def test_help_and_version_load_nothing_heavy(argv: list[str]) -> None:
    assert _heavy_modules_loaded(*argv) == []


def test_a_refused_ctl_command_loads_no_grpc() -> None:
    """Without credentials ctl stops before it would call the cluster."""
    assert "grpc" not in _heavy_modules_loaded("ctl", "--credentials", "/nonexistent", "nodes")
