"""The node's log file: rotated by size with a bounded number of files, on real files.

The node's stdout and stderr follow the file it logs into (a line printed outside logging,
gRPC's own, a traceback at exit), so they run in a process of their own here: the test's
own stderr must stay pytest's.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path

import pytest

from roleserve_core.config import LogFiles, NodeConfig
from roleserve_core.daemon import NodeOptions, configure_logging, log_files
from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.enrolment import EnrolmentRequest
from roleserve_core.errors import ConfigError
from roleserve_core.localcluster.process import LocalNode

MAX_BYTES = 4096
FILES = 2

WRITER = """
import logging, sys
from pathlib import Path
from roleserve_core.config import LogFiles
from roleserve_core.daemon import configure_logging
from roleserve_core.logtree import PROCESS_LOGGER

configure_logging("info", LogFiles(Path(sys.argv[1]), {max_bytes}, {files}))
log = logging.getLogger(PROCESS_LOGGER + ".writer")
for number in range(400):
    log.info("record %d of the writer, padded to take some room: %s", number, "x" * 40)
print("printed outside logging, after the last rotation", file=sys.stderr, flush=True)
print("and on stdout", flush=True)
"""


def test_the_log_rotates_keeping_a_bounded_number_of_files(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    writer = WRITER.format(max_bytes=MAX_BYTES, files=FILES)
    done = subprocess.run(
        [sys.executable, "-c", writer, str(log)], capture_output=True, text=True, check=True
    )
    assert (done.stdout, done.stderr) == ("", "")  # both followed the file
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "node.log",
        "node.log.1",
        "node.log.2",
    ]
    for path in tmp_path.iterdir():
        assert path.stat().st_size <= MAX_BYTES, path
    current = log.read_text()
    assert "record 399 of the writer" in current
    assert current.endswith("printed outside logging, after the last rotation\nand on stdout\n")
    older = (tmp_path / "node.log.2").read_text()
    assert "record 0 of the writer" not in older  # the oldest records are gone


def test_log_file_comes_from_the_command_line_else_roleserve_toml(tmp_path: Path) -> None:
    options = NodeOptions(NodeDataDirectory(tmp_path), EnrolmentRequest())
    assert log_files(options, NodeConfig()) is None  # stderr, for the journal
    configured = NodeConfig(log_file=tmp_path / "a.log", log_max_bytes=1 << 20, log_files=3)
    assert log_files(options, configured) == configured_log(tmp_path / "a.log")
    given = NodeOptions(NodeDataDirectory(tmp_path), EnrolmentRequest(), log_file=tmp_path / "b")
    assert log_files(given, configured) == configured_log(
        tmp_path / "b"
    )  # rotated as the file says


def configured_log(path: Path) -> LogFiles:
    return LogFiles(path, 1 << 20, 3)


def test_a_log_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no such directory" / "node.log"
    with pytest.raises(ConfigError, match=f"cannot open the log file {missing}: No such file"):
        configure_logging("info", LogFiles(missing))


def test_a_local_clusters_node_finds_a_refusal_in_a_rotated_log(tmp_path: Path) -> None:
    """``cluster up`` reads what a node logged since it started it: after a rotation the
    file is a new one, shorter than where it had read to, and is read from its start."""
    node = LocalNode(1, ipaddress.IPv4Address("127.0.0.1"), tmp_path)
    node.log_file.write_text("x" * 1000 + "\n")
    node._log_read = 1001
    node.log_file.write_text(
        "12:00:00 ERROR   root.role.controlplane.etcd: waiting for the operator: the disk is full\n"
    )
    assert node.refusal() == "root.role.controlplane.etcd: the disk is full"
