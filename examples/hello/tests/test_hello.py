"""The example plugin, driven through the test kit as any plugin's tests would."""

from __future__ import annotations

from pathlib import Path

import pytest

from roleserve_core import (
    CURATOR_CONNECTION,
    HANDLED_CUSTOM_ROLES,
    NODE_ID,
    ConfigError,
    NodeRoles,
    State,
    common_pb2,
)
from roleserve_core.testing import (
    FakeCluster,
    PluginHarness,
    StartNode,
    load_installed_plugin,
    node_record,
    wait_for_value,
)
from roleserve_example_hello import hooks

pytestmark = pytest.mark.anyio


def hello(greeting: str) -> NodeRoles:
    return NodeRoles(custom={"hello": {"greeting": greeting}})


def test_installed_through_its_entry_point() -> None:
    info = load_installed_plugin("hello")
    assert info.distribution == "roleserve-example-hello"


def test_the_node_reports_that_it_handles_the_hello_role(
    plugin_manager: PluginHarness, tmp_path: Path
) -> None:
    """Its status names ``hello``, so ``ctl roles set NODE custom:helo`` warns of the typo."""
    plugin_manager.register(hooks, "hello")
    runtime = plugin_manager.runtime(tmp_path)
    assert runtime.registry.read(HANDLED_CUSTOM_ROLES, "test").get_nowait() == ("hello",)
    assert [worker.custom_role for _, worker in runtime.workers.values()] == ["hello", "hello"]


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


NODEWATCH = "root.role.nodewatch"
"""The core worker that keeps ``cluster_nodes`` (from ``PluginHarness(cluster_nodes=True)``)."""


@pytest.fixture
def with_cluster_nodes() -> PluginHarness:
    """The example plugin, and the core's nodewatch worker, which keeps ``cluster_nodes``
    (one Watch of every node) for the workers that read it."""
    plugins = PluginHarness(cluster_nodes=True)
    plugins.register(hooks, "hello")
    return plugins


async def test_neighbours_follow_the_cluster_and_its_leader(
    fake_cluster: FakeCluster, with_cluster_nodes: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    """The fake curators stand in for the control plane: real gRPC with mutual TLS."""
    harness = await node(with_cluster_nodes.runtime(tmp_path))
    neighbours = harness.runtime.registry.read(hooks.NEIGHBOURS, "test")
    own = fake_cluster.credentials.node_id
    harness.set(NODE_ID, own)
    leader = await fake_cluster.curator()
    for listed in (own, "node-a", "node-b"):
        leader.set_node(node_record(listed))
    leader.set_node(node_record("node-new", state=common_pb2.NODE_STATE_NEW))

    # hello_neighbours runs and reads cluster_nodes, so nodewatch opens its Watch.
    harness.set_roles(hello("hi"))
    connecting = "waiting for the connection to the curator"
    await harness.wait_status(NODEWATCH, lambda s: s.note == connecting)
    harness.set(CURATOR_CONNECTION, fake_cluster.connect(leader))
    await harness.wait_state("root.role.hello_neighbours", State.HEALTHY)
    assert neighbours.get_nowait() == ("node-a", "node-b")

    leader.remove_node("node-a")
    leader.set_node(node_record("node-new"))
    await wait_for_value(neighbours, lambda ids: ids == ("node-b", "node-new"))

    # A new leader: nodewatch starts over on it and publishes the cluster as it knows it;
    # the example's worker only follows the value, and never restarts.
    successor = await fake_cluster.curator()
    successor.set_node(node_record("node-c"))
    harness.set(CURATOR_CONNECTION, fake_cluster.connect(successor))
    await wait_for_value(neighbours, lambda ids: ids == ("node-c",))
    status = harness.status("root.role.hello_neighbours")
    assert (status.state, status.restarts, status.failures) == (State.HEALTHY, 0, 0)


async def test_the_values_say_not_running_once_the_role_is_gone(
    fake_cluster: FakeCluster, with_cluster_nodes: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    """Values cannot be unset: a worker the core stops leaves a value that says so."""
    harness = await node(with_cluster_nodes.runtime(tmp_path))
    greeting = harness.runtime.registry.read(hooks.GREETING, "test")
    neighbours = harness.runtime.registry.read(hooks.NEIGHBOURS, "test")
    harness.set(NODE_ID, fake_cluster.credentials.node_id)
    leader = await fake_cluster.curator()
    leader.set_node(node_record("node-a"))
    harness.set(CURATOR_CONNECTION, fake_cluster.connect(leader))

    harness.set_roles(hello("hi"))
    await wait_for_value(neighbours, lambda ids: ids == ("node-a",))
    assert greeting.get_nowait() == "hi"

    harness.set_roles(NodeRoles())
    await wait_for_value(greeting, lambda text: text == hooks.NO_GREETING)
    await wait_for_value(neighbours, lambda ids: ids == hooks.NO_NEIGHBOURS)
    # Nobody reads cluster_nodes any more: the node closes its Watch.
    await wait_for_value(leader.open_watches, lambda count: count == 0)

    harness.set_roles(hello("welcome back"))
    await wait_for_value(greeting, lambda text: text == "welcome back")
    await wait_for_value(neighbours, lambda ids: ids == ("node-a",))
