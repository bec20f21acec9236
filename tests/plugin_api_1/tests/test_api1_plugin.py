"""The plugin written for plugin API 1, driven through the test kit as its tests were then.

The suite is frozen with its plugin: it imports what plugin API 1 documented where API 1
put it. Those of its names that moved since warn, naming their place today; the warnings
are expected here (this suite, as pytest runs it, makes any other warning an error), and
the first test checks that each one says where its name lives now.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from roleserve_core import NodeRoles, State
from roleserve_core.errors import ConfigError
from roleserve_core.proto import common_pb2
from roleserve_core.testing import (
    FakeCluster,
    NodeHarness,
    PluginHarness,
    load_installed_plugin,
    node_record,
    wait_for_value,
)

MOVED = r"^roleserve_core\.keys\.\w+ has moved: "
with pytest.warns(DeprecationWarning, match=MOVED) as moved_here:
    from roleserve_core.keys import CURATOR_CONNECTION, HANDLED_CUSTOM_ROLES, NODE_ID
with pytest.warns(DeprecationWarning, match=MOVED) as moved_in_plugin:
    from roleserve_api1 import hooks

pytestmark = pytest.mark.anyio

StartNode = Callable[..., Awaitable[NodeHarness]]


def api1(greeting: str) -> NodeRoles:
    return NodeRoles(custom={"api1": {"greeting": greeting}})


def test_the_moved_names_warn_naming_their_place_today() -> None:
    """The suite's own imports of roleserve_core.keys, then its plugin's."""
    moved = [*moved_here, *moved_in_plugin]
    assert [str(warning.message) for warning in moved] == [
        f"roleserve_core.keys.{name} has moved: import {name} from roleserve_core; the old "
        "name works while roleserve-core accepts plugin API 1"
        for name in (
            *("CURATOR_CONNECTION", "HANDLED_CUSTOM_ROLES", "NODE_ID"),
            *("CLUSTER_NODES", "NODE_ID", "ROLES"),
        )
    ]
    assert [Path(warning.filename).name for warning in moved] == [
        *(["test_api1_plugin.py"] * 3),
        *(["hooks.py"] * 3),
    ]


def test_installed_through_its_entry_point() -> None:
    info = load_installed_plugin("api1")
    assert info.distribution == "roleserve-api1"


def test_the_node_reports_that_it_handles_the_api1_role(
    plugin_manager: PluginHarness, tmp_path: Path
) -> None:
    """Its status names ``api1``, so ``ctl roles set NODE custom:apl1`` warns of the typo."""
    plugin_manager.register(hooks, "api1")
    runtime = plugin_manager.runtime(tmp_path)
    # Plugin API 1's roleserve_core.values was the registry; it still names it, warning.
    with pytest.deprecated_call(match="import ValueRegistry from roleserve_core;"):
        from roleserve_core.values import ValueRegistry
    assert isinstance(runtime.registry, ValueRegistry)
    assert runtime.registry.read(HANDLED_CUSTOM_ROLES, "test").get_nowait() == ("api1",)
    assert [worker.custom_role for _, worker in runtime.workers.values()] == ["api1", "api1"]


async def test_worker_follows_the_custom_role(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    plugin_manager.register(hooks, "api1")
    harness = await node(plugin_manager.runtime(tmp_path))
    greeting = harness.runtime.registry.read(hooks.GREETING, "test")

    waiting = await harness.wait_status("root.role.api1", lambda s: s.note != "")
    assert (waiting.state, waiting.note) == (State.NEW, "waiting for its roles")

    harness.set_roles(api1("hi"))
    await harness.wait_state("root.role.api1", State.HEALTHY)
    assert greeting.get_nowait() == "hi"

    harness.set_roles(api1("good morning"))
    await wait_for_value(greeting, lambda text: text == "good morning")

    harness.set_roles(NodeRoles())
    stopped = await harness.wait_state("root.role.api1", State.NEW)
    assert (stopped.restarts, stopped.failures) == (1, 0)


async def test_the_greeting_setting_is_used_when_the_role_gives_none(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path
) -> None:
    plugin_manager.register(hooks, "api1")
    config = {"api1": {"greeting": "ahoy"}}  # [plugins.api1] in roleserve.toml
    harness = await node(plugin_manager.runtime(tmp_path, config=config))
    greeting = harness.runtime.registry.read(hooks.GREETING, "test")
    harness.set_roles(NodeRoles(custom={"api1": {}}))
    assert await wait_for_value(greeting) == "ahoy"
    harness.set_roles(api1("hi"))
    await wait_for_value(greeting, lambda text: text == "hi")


def test_the_greeting_setting_must_be_a_string(
    plugin_manager: PluginHarness, tmp_path: Path
) -> None:
    plugin_manager.register(hooks, "api1")
    with pytest.raises(ConfigError, match=r"\[plugins.api1\] greeting must be a string"):
        plugin_manager.runtime(tmp_path, config={"api1": {"greeting": 1}})


NODEWATCH = "root.role.nodewatch"
"""The core worker that keeps ``cluster_nodes`` (from ``PluginHarness(cluster_nodes=True)``)."""


@pytest.fixture
def with_cluster_nodes() -> PluginHarness:
    """The example plugin, and the core's nodewatch worker, which keeps ``cluster_nodes``
    (one Watch of every node) for the workers that read it."""
    plugins = PluginHarness(cluster_nodes=True)
    plugins.register(hooks, "api1")
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

    # api1_neighbours runs and reads cluster_nodes, so nodewatch opens its Watch.
    harness.set_roles(api1("hi"))
    connecting = "waiting for the connection to the curator"
    await harness.wait_status(NODEWATCH, lambda s: s.note == connecting)
    harness.set(CURATOR_CONNECTION, fake_cluster.connect(leader))
    await harness.wait_state("root.role.api1_neighbours", State.HEALTHY)
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
    status = harness.status("root.role.api1_neighbours")
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

    harness.set_roles(api1("hi"))
    await wait_for_value(neighbours, lambda ids: ids == ("node-a",))
    assert greeting.get_nowait() == "hi"

    harness.set_roles(NodeRoles())
    await wait_for_value(greeting, lambda text: text == hooks.NO_GREETING)
    await wait_for_value(neighbours, lambda ids: ids == hooks.NO_NEIGHBOURS)
    # Nobody reads cluster_nodes any more: the node closes its Watch.
    await wait_for_value(leader.open_watches, lambda count: count == 0)

    harness.set_roles(api1("welcome back"))
    await wait_for_value(greeting, lambda text: text == "welcome back")
    await wait_for_value(neighbours, lambda ids: ids == ("node-a",))
