"""The example plugin, driven through the test kit as any plugin's tests would."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from roleserve_core import NodeRoles, State
from roleserve_core.errors import ConfigError
from roleserve_core.keys import CURATOR_CONNECTION
from roleserve_core.proto import common_pb2, curator_pb2
from roleserve_core.testing import (
    FakeCluster,
    NodeHarness,
    PluginHarness,
    load_installed_plugin,
    wait_for_value,
)
from roleserve_example_hello import hooks

pytestmark = pytest.mark.anyio

StartNode = Callable[..., Awaitable[NodeHarness]]


def hello(greeting: str) -> NodeRoles:
    return NodeRoles(custom={"hello": {"greeting": greeting}})


def test_installed_through_its_entry_point() -> None:
    info = load_installed_plugin("hello")
    assert info.distribution == "roleserve-example-hello"


async def test_worker_follows_the_custom_role(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    plugin_manager.register(hooks, "hello")
    harness = await node(plugin_manager.runtime(tmp_path))
    greeting = harness.runtime.registry.read(hooks.GREETING, "test")

    waiting = await harness.wait_status("root.role.hello", lambda s: s.note != "")
    assert (waiting.state, waiting.note) == (State.NEW, "waiting for its roles")

    harness.set_roles(hello("hi"))
    await harness.wait_state("root.role.hello", State.HEALTHY)
    assert greeting.get_nowait() == "hi"

    harness.set_roles(hello("good morning"))
    await wait_for_value(greeting, lambda text: text == "good morning")

    harness.set_roles(NodeRoles())
    stopped = await harness.wait_state("root.role.hello", State.NEW)
    assert (stopped.restarts, stopped.failures) == (1, 0)


async def test_the_greeting_setting_is_used_when_the_role_gives_none(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    plugin_manager.register(hooks, "hello")
    config = {"hello": {"greeting": "ahoy"}}  # [plugins.hello] in roleserve.toml
    harness = await node(plugin_manager.runtime(tmp_path, config=config))
    greeting = harness.runtime.registry.read(hooks.GREETING, "test")
    harness.set_roles(NodeRoles(custom={"hello": {}}))
    assert await wait_for_value(greeting) == "ahoy"
    harness.set_roles(hello("hi"))
    await wait_for_value(greeting, lambda text: text == "hi")


def test_the_greeting_setting_must_be_a_string(
    plugin_manager: PluginHarness, tmp_path: Path
) -> None:
    plugin_manager.register(hooks, "hello")
    with pytest.raises(ConfigError, match=r"\[plugins.hello\] greeting must be a string"):
        plugin_manager.runtime(tmp_path, config={"hello": {"greeting": 1}})


def cluster_node(node_id: str, state: int = common_pb2.NODE_STATE_UP) -> curator_pb2.Node:
    return curator_pb2.Node(id=node_id, state=state)  # type: ignore[arg-type]


async def test_neighbours_follow_the_cluster_and_its_leader(
    fake_cluster: FakeCluster, plugin_manager: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    """The fake curators stand in for the control plane: real gRPC with mutual TLS."""
    plugin_manager.register(hooks, "hello")
    harness = await node(plugin_manager.runtime(tmp_path))
    neighbours = harness.runtime.registry.read(hooks.NEIGHBOURS, "test")
    own = fake_cluster.credentials.node_id
    leader = await fake_cluster.curator()
    for listed in (own, "node-a", "node-b"):
        leader.set_node(cluster_node(listed))
    leader.set_node(cluster_node("node-new", common_pb2.NODE_STATE_NEW))

    harness.set_roles(hello("hi"))
    connecting = "waiting for the connection to the curator"
    await harness.wait_status("root.role.hello_neighbours", lambda s: s.note == connecting)
    harness.set(CURATOR_CONNECTION, fake_cluster.connect(leader))
    await harness.wait_state("root.role.hello_neighbours", State.HEALTHY)
    assert neighbours.get_nowait() == ("node-a", "node-b")

    leader.remove_node("node-a")
    leader.set_node(cluster_node("node-new"))
    await wait_for_value(neighbours, lambda ids: ids == ("node-b", "node-new"))

    # A new leader: the worker starts over on it, and sees the cluster as it knows it.
    successor = await fake_cluster.curator()
    successor.set_node(cluster_node("node-c"))
    harness.set(CURATOR_CONNECTION, fake_cluster.connect(successor))
    await wait_for_value(neighbours, lambda ids: ids == ("node-c",))
    status = await harness.wait_state("root.role.hello_neighbours", State.HEALTHY)
    assert status.failures == 0
