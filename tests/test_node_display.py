"""How a node is shown (``cli._node_display``): the one place ``ctl nodes`` and ``cluster
up|status`` take a node's row, words, marks and the lines that explain them from."""

from __future__ import annotations

import pytest

from roleserve_core.cli._node_display import (
    HEADERS,
    NodeTable,
    health_name,
    node_json,
    node_row,
    state_name,
)
from roleserve_core.proto import common_pb2, management_pb2


def listed(node_id: str, conflict: str = "") -> management_pb2.Node:
    node = management_pb2.Node(
        id=node_id,
        state=common_pb2.NODE_STATE_UP,
        health=management_pb2.Node.HEALTHY,
        conflict=conflict,
    )
    node.status.external_address = "127.0.0.11"
    return node


@pytest.fixture(autouse=True)
def command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLESERVE_COMMAND", "roleserve")


def test_a_table_of_listed_nodes_is_their_rows_then_what_their_marks_mean() -> None:
    """What ``ctl nodes`` prints: a row per node, then a line per CONFLICT and per ``!``."""
    claimed = listed("node-a", conflict="a second process from 127.0.0.99")
    failed = listed("node-b")
    failed.status.plugins.add(name="brittle", state="failed")
    table = NodeTable()
    table.add(claimed)
    table.add(failed)
    lines = table.render(None).splitlines()
    assert lines[0].split() == list(HEADERS[1:])
    assert lines[1].split()[:4] == ["node-a", "127.0.0.11", "UP", "-"]
    assert "HEALTHY, CONFLICT" in lines[1]
    assert "HEALTHY!" in lines[2]
    assert lines[3:] == [
        "node-a: CONFLICT: a second process from 127.0.0.99",
        "node-b: ! plugin brittle failed: it started without; "
        "`roleserve ctl plugins node-b` says why",
    ]


def test_a_commands_columns_go_around_the_nodes_and_its_lines_under_the_marks() -> None:
    """What ``cluster status`` prints: its process columns before, its plugins' after; a
    node the leader does not list has what is known locally and ``-`` where the leader
    would have said more, and no line under the table."""
    failed = listed("node-a")
    failed.status.plugins.add(name="brittle", state="failed")
    table = NodeTable(before=("NODE", "PID"), after=("K8S",))
    table.add(failed, before=["n1", "41"], after=["Ready"])
    table.add(None, before=["n2", "stopped"], after=["-"], node_id="", address="127.0.0.12")
    lines = table.render(None, lines=[None, "hosts files: here"]).splitlines()
    assert lines[0].split() == ["NODE", "PID", *HEADERS[1:], "K8S"]
    assert lines[1].split() == ["n1", "41", *node_row(failed)[1:5], "HEALTHY!", "-", "Ready"]
    assert lines[2].split() == ["n2", "stopped", "-", "127.0.0.12", "-", "-", "-", "-", "-"]
    assert lines[3:] == [
        "node-a: ! plugin brittle failed: it started without; "
        "`roleserve ctl plugins node-a` says why",
        "hosts files: here",
    ]


def test_the_words_and_the_json_of_a_node() -> None:
    """A state or health newer than this client is its number, not a failure."""
    assert (state_name(common_pb2.NODE_STATE_STANDBY), state_name(42)) == ("STANDBY", "42")  # type: ignore[arg-type]
    assert health_name(management_pb2.Node.HEARTBEAT_TIMEOUT) == "HEARTBEAT_TIMEOUT"
    shown = node_json(listed("node-a"))
    assert (shown["id"], shown["state"], shown["health"]) == ("node-a", "UP", "HEALTHY")
    assert (shown["heartbeat_age"], shown["failed_plugins"], shown["conflict"]) == (None, [], None)


def test_a_failed_plugin_is_the_word_the_node_sends() -> None:
    """``ctl nodes`` marks a failed plugin by the wire's word, without the plugin loader."""
    from roleserve_core.cli._node_display import PLUGIN_FAILED
    from roleserve_core.plugin_loader import PluginState

    assert PLUGIN_FAILED == PluginState.FAILED
