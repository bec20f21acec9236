"""The ``roleserve`` command fails in one line for a refusal, with a traceback for a bug.

Errors raised inside anyio task groups arrive wrapped in (nested) exception groups; the
command unwraps them. ``--debug`` and ``$ROLESERVE_DEBUG`` show the traceback of a refusal.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from roleserve_core.cli import main
from roleserve_core.cli._failure import DEBUG_ENV, sole_error
from roleserve_core.errors import ConfigError, RoleserveError


def _in_task_group(*errors: BaseException) -> None:
    """Raise ``errors`` from tasks of a task group, as a command's body would."""

    async def body() -> None:
        async with anyio.create_task_group() as tasks:
            for error in errors:

                async def fail(error: BaseException = error) -> None:
                    raise error

                tasks.start_soon(fail)

    anyio.run(body)


def test_one_refusal_in_a_task_group_comes_out_alone() -> None:
    with pytest.raises(ConfigError, match="bad key"), sole_error():
        _in_task_group(ConfigError("bad key"))


def test_a_nested_group_is_unwrapped_past_its_cancellations() -> None:
    inner = BaseExceptionGroup("inner", [asyncio.CancelledError(), RoleserveError("refused")])
    with pytest.raises(RoleserveError, match="refused"), sole_error():
        raise BaseExceptionGroup("outer", [asyncio.CancelledError(), inner])


def test_several_refusals_come_out_as_the_first() -> None:
    with pytest.raises(RoleserveError, match="first"), sole_error():
        raise ExceptionGroup("two", [RoleserveError("first"), RoleserveError("second")])


def test_a_bug_beside_a_refusal_keeps_the_group() -> None:
    with pytest.raises(ExceptionGroup), sole_error():
        raise ExceptionGroup("two", [RoleserveError("refused"), ZeroDivisionError()])


def _broken_cluster(tmp_path: Path) -> Path:
    """A cluster directory whose node 1 refuses its configuration at once (exit 2)."""
    directory = tmp_path / "cluster"
    (directory / "n1").mkdir(parents=True)
    (directory / "n1" / "roleserve.toml").write_text("[node]\nbogus = 1\n")
    return directory


def _cluster_up(directory: Path, *flags: str, env: dict[str, str] | None = None) -> str:
    command = [sys.executable, "-m", "roleserve_core", *flags, "cluster", "up"]
    # The node exits on its configuration before it binds anything: any address will do.
    command += ["--nodes", "1", "--dir", str(directory), "--first-address", "127.0.99.11"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    return done.stderr


def test_cluster_up_reports_a_node_that_exits_in_one_line(tmp_path: Path) -> None:
    """The failure is raised inside cluster up's task group: once a 40-line traceback."""
    stderr = _cluster_up(_broken_cluster(tmp_path))
    assert "Traceback" not in stderr
    assert "ExceptionGroup" not in stderr
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert errors[0].startswith("roleserve cluster: error: node 1 exited"), stderr
    assert "unknown [node] settings bogus" in stderr  # the node's own line, from its log


def test_debug_shows_the_traceback_of_a_refusal(tmp_path: Path) -> None:
    stderr = _cluster_up(_broken_cluster(tmp_path), "--debug")
    assert "Traceback" in stderr
    assert "roleserve cluster: error: node 1 exited" in stderr


def test_the_debug_variable_does_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DEBUG_ENV, "1")
    code = main(["ctl", "--credentials", str(tmp_path / "none"), "nodes"])
    stderr = capsys.readouterr().err
    assert code == 2
    assert "Traceback" in stderr
    assert stderr.rstrip().splitlines()[-1].startswith("roleserve ctl: error: ")
