"""What ``cluster up`` shows on a terminal while the cluster runs: the live table, redrawn,
with the hint on how to operate the cluster under it every time (no processes here: the
table is a stand-in)."""

from __future__ import annotations

import io
from pathlib import Path

import anyio
import pytest

from roleserve_core.cli import _cluster_commands as cluster_command
from roleserve_core.localcluster import LocalCluster

CLEAR = "\x1b[2J\x1b[H"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class EnoughScreensError(Exception):
    """Ends the redraw loop after the screens the test wants."""


def test_the_hint_stays_under_the_table_on_every_redraw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[int] = []

    async def table(cluster: LocalCluster) -> str:
        if len(drawn) == 3:
            raise EnoughScreensError
        drawn.append(len(drawn))
        return f"TABLE {len(drawn)}"

    screen = Terminal()
    monkeypatch.setattr(cluster_command, "_status_table", table)
    monkeypatch.setattr(cluster_command, "REFRESH", 0)
    monkeypatch.setattr("sys.stdout", screen)
    monkeypatch.setenv("ROLESERVE_COMMAND", "./dev roleserve")
    with pytest.raises(EnoughScreensError):
        anyio.run(cluster_command._live_status, LocalCluster(tmp_path, 1), tmp_path)
    screens = screen.getvalue().split(CLEAR)[1:]
    owner = tmp_path / "owner"
    hint = f"operate it with: export ROLESERVE_CREDENTIALS={owner}; ./dev roleserve ctl nodes"
    assert len(screens) == 3
    for number, shown in enumerate(screens, start=1):
        assert shown.endswith(f"TABLE {number}\n\n{hint}\n")
