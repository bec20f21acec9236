"""``ctl`` remembers the leader it found in the access directory (``_last_leader``) and
asks it first next time: one connection instead of one to every curator and one to the
leader. A remembered leader that does not lead, or is not there, is searched past."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from roleserve_core.cli.ctl import _session
from roleserve_core.cli.ctl._last_leader import LEADER_FILE, remember, remembered
from roleserve_core.testing import random_loopback


def never_search(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the curators were searched for the leader")


def test_the_leader_found_is_remembered_and_asked_first(
    ctl_cluster: Any, ctl_access_dir: Path, run_ctl_main: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_ctl_main("nodes")
    assert (first.code, first.err) == (0, "")
    found = remembered(ctl_access_dir)
    assert found is not None
    assert found[0] == ctl_cluster.leader.node_id

    monkeypatch.setattr(_session, "find_leader", never_search)
    again = run_ctl_main("nodes")
    assert (again.code, again.err, again.out) == (0, "", first.out)


@pytest.mark.parametrize("stale", ["another node", "nothing listens"])
def test_a_remembered_leader_that_is_not_the_leader_is_searched_past(
    stale: str, ctl_cluster: Any, ctl_access_dir: Path, run_ctl_main: Any
) -> None:
    leader_id = ctl_cluster.leader.node_id
    first = run_ctl_main("nodes")
    assert first.code == 0, first.err
    found = remembered(ctl_access_dir)
    assert found is not None
    if stale == "another node":  # its certificate does not name the remembered node
        line = f"node-{'0' * 32} {found[1]}"
    else:
        with socket.create_server((str(random_loopback()), 0)) as closed:
            host, port = closed.getsockname()
        line = f"{leader_id} {host}:{port}"
    (ctl_access_dir / LEADER_FILE).write_text(line + "\n")

    again = run_ctl_main("nodes")
    assert (again.code, again.err, again.out) == (0, "", first.out)
    assert remembered(ctl_access_dir) == found  # corrected


def test_a_remembered_leader_that_hangs_is_searched_past(
    ctl_cluster: Any, ctl_access_dir: Path, run_ctl_main: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remembered address that accepts the connection and never answers (a stopped
    process, a paused machine: here a socket that listens and never reads) is given
    ``LEADER_ANSWER_TIMEOUT`` to say it leads, not the command's whole ``--timeout``; then
    the curators are asked, the leader answers, and the file is corrected, so the cost is
    paid once. The bound is shortened here so that the test does not wait the real one."""
    first = run_ctl_main("nodes")
    assert first.code == 0, first.err
    found = remembered(ctl_access_dir)
    assert found is not None
    bounds: list[float] = []
    leading_channel = _session._leading_channel

    async def bounded(access: Any, node_id: str, target: str, bound: float) -> Any:
        bounds.append(bound)
        return await leading_channel(access, node_id, target, bound)

    monkeypatch.setattr(_session, "_leading_channel", bounded)
    monkeypatch.setattr(_session, "LEADER_ANSWER_TIMEOUT", 0.2)
    with socket.create_server((str(random_loopback()), 0)) as hung:
        host, port = hung.getsockname()
        (ctl_access_dir / LEADER_FILE).write_text(f"{found[0]} {host}:{port}\n")
        again = run_ctl_main("nodes", "--timeout", "30")
    assert (again.code, again.err, again.out) == (0, "", first.out)
    assert bounds[0] == 0.2  # the hung one: the answer's bound, not --timeout
    assert remembered(ctl_access_dir) == found  # corrected: the next run asks the leader


def test_with_endpoint_nothing_is_remembered(
    ctl_cluster: Any, ctl_access_dir: Path, run_ctl_main: Any
) -> None:
    result = run_ctl_main("nodes", "--endpoint", ctl_cluster.address)
    assert result.code == 0, result.err
    assert not (ctl_access_dir / LEADER_FILE).exists()


@pytest.mark.parametrize(
    "content",
    [b"", b"only-an-id\n", b"an id and more\n", b"\xff\xfe not utf-8\n"],
    ids=["empty", "one-word", "three-words", "not-utf8"],
)
def test_a_leader_file_that_does_not_read_as_one_is_none(tmp_path: Path, content: bytes) -> None:
    """Whatever the file holds, ctl searches as without it rather than fail."""
    (tmp_path / LEADER_FILE).write_bytes(content)
    assert remembered(tmp_path) is None


def test_a_leader_file_that_cannot_be_read_or_written_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / LEADER_FILE).mkdir()  # neither readable nor replaceable as a file
    assert remembered(tmp_path) is None
    remember(tmp_path, "node-a", "127.0.0.1:7835")
    assert remembered(tmp_path) is None


def test_the_leader_file_is_one_line_replaced_whole(tmp_path: Path) -> None:
    remember(tmp_path, "node-a", "127.0.0.1:7835")
    remember(tmp_path, "node-b", "127.0.0.2:7835")
    assert (tmp_path / LEADER_FILE).read_text() == "node-b 127.0.0.2:7835\n"
    assert remembered(tmp_path) == ("node-b", "127.0.0.2:7835")
