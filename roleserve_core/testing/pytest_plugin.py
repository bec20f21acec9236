"""The roleserve pytest plugin: fixtures for testing roleserve plugins and the core.

Registered through the ``pytest11`` entry point of roleserve-core, so every plugin's own
test suite has these fixtures without a conftest:

``anyio_backend``
    ``"asyncio"``: roleserve needs asyncio (grpc.aio runs on it). Every event loop of the
    session is a ``LingeringEventLoop`` (set in ``pytest_configure``).
``fake_clock``
    A ``FakeClock``; supervisors started by ``supervisor_runner`` use it.
``value_registry``
    An empty ``ValueRegistry``.
``plugin_manager``
    A ``PluginHarness``: the built-in plugin ``core`` (the node's values) plus what the
    test registers; strict, so a plugin's mistake fails the test at once with its line.
``supervisor_runner``
    Starts supervisors (``await supervisor_runner.start(root)``) and stops them after the
    test.
``node``
    A factory: ``await node(runtime)`` runs a ``NodeRuntime`` and returns a ``NodeHarness``.
``terminal width`` (autouse)
    No ``$COLUMNS`` in a test's environment, os.environ's or the process's own: tables
    size themselves to it (``roleserve_core.cli._table``), and GNU readline, which the
    test session imports, exports ``COLUMNS=80`` into the process's environment (not
    ``os.environ``), so every command a test ran would have fitted 80 columns. A test
    that wants a width sets it (``monkeypatch.setenv``).
``fake_cluster``
    A ``FakeCluster``: a throwaway CA, the node under test's credentials, and
    ``await fake_cluster.curator()`` for fake curators (real gRPC with mutual TLS on a
    loopback address of their own). Request it before ``node``, so the curators stop after
    the node did.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from roleserve_core.registry import ValueRegistry
from roleserve_core.runtime import NodeRuntime
from roleserve_core.testing._clock import FakeClock
from roleserve_core.testing._cluster import FakeCluster, ThrowawayCA
from roleserve_core.testing._harness import NodeHarness, PluginHarness, StartNode, SupervisorRunner
from roleserve_core.testing._loop import LingeringEventLoopPolicy, close_lingering_loops


def pytest_configure(config: pytest.Config) -> None:
    """Event loops that close late (see ``LingeringEventLoop``): grpc.aio can still hand
    a test's loop an event after the test ended, and must not fail the next test."""
    asyncio.set_event_loop_policy(LingeringEventLoopPolicy())


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the loops still lingering, and give asyncio its default policy back."""
    close_lingering_loops()
    asyncio.set_event_loop_policy(None)


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``$COLUMNS`` unless the test sets it (see the module docstring)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    os.unsetenv("COLUMNS")


@pytest.fixture
def anyio_backend() -> str:
    """roleserve runs on anyio's asyncio backend."""
    return "asyncio"


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock that moves only when the test advances it."""
    return FakeClock()


@pytest.fixture
def value_registry() -> ValueRegistry:
    """An empty value registry."""
    return ValueRegistry()


@pytest.fixture
def plugin_manager() -> PluginHarness:
    """The built-in plugin core plus the plugins this test registers, strictly."""
    return PluginHarness()


@pytest.fixture
async def supervisor_runner(fake_clock: FakeClock) -> AsyncIterator[SupervisorRunner]:
    """Starts supervisors on ``fake_clock``; stops them when the test ends."""
    async with SupervisorRunner(fake_clock) as runner:
        yield runner


@pytest.fixture
def node(
    supervisor_runner: SupervisorRunner,
) -> StartNode:
    """``await node(runtime, **supervisor_options)`` runs a node runtime for this test."""

    async def start(runtime: NodeRuntime, **options: Any) -> NodeHarness:
        return await NodeHarness.start(supervisor_runner, runtime, **options)

    return start


@pytest.fixture
async def fake_cluster() -> AsyncIterator[FakeCluster]:
    """A throwaway cluster whose fake curators serve until the test ends."""
    ca = ThrowawayCA()
    async with contextlib.AsyncExitStack() as stack:
        yield FakeCluster(ca, ca.node(), stack)
