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
gRPC's variables (autouse)
    ``GRPC_EXPERIMENTS`` and ``GRPC_VERBOSITY`` as they were before each test: a test that
    runs ``roleserve node ...`` through ``main()`` sets them in os.environ, as the command
    does for its process, and every subprocess a later test started would inherit them.
``fake_cluster``
    A ``FakeCluster``: a throwaway CA, the node under test's credentials, and
    ``await fake_cluster.curator()`` for fake curators (real gRPC with mutual TLS on a
    loopback address of their own). Request it before ``node``, so the curators stop after
    the node did.
``ctl_cluster``
    A ``FakeCtlCluster`` serving, for a test of a ``ctl`` command: the leading curator's
    ``Management`` and ``CuratorLocal`` and a node's ``NodeManagement`` on a loopback
    address, in a thread of its own (``ServerThread``); it answers from fields the test sets
    and records every request. No nodes unless the test sets them.
``ctl_access_dir``
    The owner's access directory of ``ctl_cluster`` (``--credentials``).
``run_roleserve_main``
    ``run_roleserve_main("ctl", ...)``: ``roleserve ...`` through ``main()``, in this
    process; a ``MainResult`` of its exit code and output.
``run_ctl_main``
    ``run_ctl_main("nodes")``: ``roleserve ctl --credentials <ctl_access_dir> nodes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from roleserve_core.access import ClusterAccess
from roleserve_core.cli import GRPC_VERBOSITY_ENV
from roleserve_core.registry import ValueRegistry
from roleserve_core.rpc._offload import GRPC_EXPERIMENTS_ENV
from roleserve_core.runtime import NodeRuntime
from roleserve_core.testing._clock import FakeClock
from roleserve_core.testing._cluster import FakeCluster, ThrowawayCA
from roleserve_core.testing._ctl_cluster import (
    FakeCtlCluster,
    MainResult,
    RunMain,
    ServerThread,
    run_main,
    start_fake_ctl_cluster,
)
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


_GRPC_PROCESS_VARIABLES = (GRPC_EXPERIMENTS_ENV, GRPC_VERBOSITY_ENV)
"""What ``roleserve`` sets for gRPC in its own process (``roleserve_core.cli``)."""


@pytest.fixture(autouse=True)
def _grpc_variables_restored() -> Iterator[None]:
    """gRPC's variables as they were before the test (see the module docstring)."""
    before = {name: os.environ.get(name) for name in _GRPC_PROCESS_VARIABLES}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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


@pytest.fixture
def ctl_server_thread() -> Iterator[ServerThread]:
    """The thread ``ctl_cluster`` serves on, closed after the test."""
    thread = ServerThread()
    try:
        yield thread
    finally:
        thread.close()


@pytest.fixture
def ctl_cluster(ctl_server_thread: ServerThread) -> Iterator[FakeCtlCluster]:
    """A fake cluster for ``roleserve ctl``, its CA a throwaway one, serving until the
    test ends."""
    ca = ThrowawayCA()
    cluster = start_fake_ctl_cluster(ctl_server_thread, ca.node(), ca)
    try:
        yield cluster
    finally:
        assert cluster.server is not None
        ctl_server_thread.run(cluster.server.stop(None))


@pytest.fixture
def ctl_access_dir(ctl_cluster: FakeCtlCluster, tmp_path: Path) -> Path:
    """The owner's access directory of ``ctl_cluster``: its CA's ``owner`` credentials and
    its address."""
    access_dir = tmp_path / "owner"
    ClusterAccess.of(ctl_cluster.issuer.user(), [ctl_cluster.address]).save(access_dir)
    return access_dir


@pytest.fixture
def run_roleserve_main(capsys: pytest.CaptureFixture[str]) -> RunMain:
    """``run_roleserve_main("ctl", ...)``: ``roleserve ...`` through ``main()``."""

    def run(*argv: str) -> MainResult:
        return run_main(capsys, *argv)

    return run


@pytest.fixture
def run_ctl_main(ctl_access_dir: Path, run_roleserve_main: RunMain) -> RunMain:
    """``run_ctl_main("nodes", ...)``: ``roleserve ctl --credentials <owner> ...`` of
    ``ctl_cluster``, through ``main()``."""

    def run(*argv: str) -> MainResult:
        return run_roleserve_main("ctl", "--credentials", str(ctl_access_dir), *argv)

    return run
