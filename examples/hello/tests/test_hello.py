"""The example plugin, driven through the test kit as any plugin's tests would."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from roleserve_core import NodeRoles, State
from roleserve_core.testing import NodeHarness, PluginHarness, load_installed_plugin, wait_for_value
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
