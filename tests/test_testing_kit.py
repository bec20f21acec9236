"""The test kit plugin authors rely on: waits that explain themselves, real-component gates."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace

import anyio
import grpc
import pytest

from roleserve_core import (
    ClusterAccess,
    NodeContext,
    RunContext,
    Setting,
    State,
    Value,
    Worker,
    hookimpl,
)
from roleserve_core.errors import PluginAPIVersionError, PluginLoadError
from roleserve_core.plugin_loader import PluginState
from roleserve_core.proto import common_pb2, management_pb2
from roleserve_core.testing import (
    REQUIRE_REAL_ENV,
    FakeCtlCluster,
    PluginHarness,
    RunMain,
    StartNode,
    SupervisorRunner,
    load_installed_plugin,
    mounted_tmpfs,
    require_real,
    run_ctl,
    start_plugin_node,
    wait_for_state,
    wait_for_value,
)
from roleserve_core.testing._loop import LINGER, LingeringEventLoop, close_lingering_loops


def test_require_real_passes_when_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_REAL_ENV, "1")
    require_real("etcd", "/usr/bin/etcd", "apt-get install etcd-server")


def test_require_real_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_REAL_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"etcd is not available \(apt-get"):
        require_real("etcd", None, "apt-get install etcd-server")


def test_require_real_fails_when_ci_requires_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_REAL_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"etcd is not available.*{REQUIRE_REAL_ENV}"):
        require_real("etcd", "", "apt-get install etcd-server")


def test_a_tmpfs_fills_and_frees(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", 8 * 1024 * 1024) as disk:
        assert 7 * 1024 * 1024 < disk.free <= 8 * 1024 * 1024
        disk.fill(leave=1024 * 1024)
        assert 1024 * 1024 - 8192 <= disk.free <= 1024 * 1024 + 8192
        disk.release()
        assert disk.free > 7 * 1024 * 1024
    assert not (tmp_path / "disk").is_mount()


def test_a_tmpfs_where_mounting_fails_skips_or_fails_under_require_real(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no mount(8) to run
    monkeypatch.delenv(REQUIRE_REAL_ENV, raising=False)
    skipped = pytest.raises(pytest.skip.Exception, match=r"a tmpfs mount \(.*\) is not available")
    with skipped, mounted_tmpfs(tmp_path / "disk", 1024 * 1024):
        pass
    monkeypatch.setenv(REQUIRE_REAL_ENV, "1")
    with (
        pytest.raises(pytest.fail.Exception, match=REQUIRE_REAL_ENV),
        mounted_tmpfs(tmp_path / "disk", 1024 * 1024),
    ):
        pass


def test_plugin_harness_leaves_installed_plugins_out(plugin_manager: PluginHarness) -> None:
    assert plugin_manager.plugins.loaded() == ["core"]


def greeter(greeting: str) -> SimpleNamespace:
    """A plugin whose one worker, named as the plugin is, says its setting ``greeting``
    (default: ``greeting``) in its note."""
    setting = Setting("greeting", str, greeting, "What the worker says.")

    def workers(node: NodeContext) -> list[Worker]:
        async def say(ctx: RunContext) -> None:
            ctx.set_note(setting.read(node.config))
            ctx.signal_healthy()
            await anyio.sleep_forever()

        return [Worker(node.plugin, say)]

    return SimpleNamespace(
        roleserve_settings=hookimpl(lambda: [setting]), roleserve_workers=hookimpl(workers)
    )


@pytest.mark.anyio
async def test_start_plugin_node_runs_exactly_the_plugins_with_their_config(
    node: StartNode, tmp_path: Path
) -> None:
    plugins = {"first": greeter("hello"), "second": greeter("hi")}
    harness = await start_plugin_node(
        node, tmp_path / "node", plugins, config={"second": {"greeting": "good evening"}}
    )
    assert harness.runtime.plugins.loaded() == ["core", "first", "second"]
    assert harness.runtime.data_dir == tmp_path / "node"
    notes = [(await harness.wait_state(f"root.role.{name}")).note for name in plugins]
    assert notes == ["hello", "good evening"]
    assert "nodewatch" not in harness.runtime.workers


@pytest.mark.anyio
async def test_start_plugin_node_adds_the_core_workers_asked_for(
    node: StartNode, tmp_path: Path
) -> None:
    watching = await start_plugin_node(node, tmp_path / "a", {}, cluster_nodes=True)
    assert "nodewatch" in watching.runtime.workers
    assert "heartbeat" not in watching.runtime.workers
    everything = await start_plugin_node(node, tmp_path / "b", {}, core_workers=True)
    assert {"nodewatch", "heartbeat"} <= set(everything.runtime.workers)


def test_run_ctl_runs_the_command_and_says_what_a_failed_one_said(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    done = run_ctl(nowhere, "nodes")
    assert done.returncode == 2
    assert done.stderr.startswith(f"roleserve ctl: error: no cluster credentials at {nowhere};")
    with pytest.raises(AssertionError, match=r"^ctl nodes --json exited 2: roleserve ctl: error"):
        run_ctl(nowhere, "nodes", "--json", check=True)


def test_ctl_cluster_serves_ctl_as_its_owner_and_records_each_request(
    ctl_cluster: FakeCtlCluster, ctl_access_dir: Path, run_ctl_main: RunMain
) -> None:
    assert ClusterAccess.load(ctl_access_dir).credentials.identity == "owner"
    assert run_ctl_main("nodes", "--json").out == "[]\n"  # no nodes unless the test sets them
    leader = ctl_cluster.leader.node_id
    ctl_cluster.nodes = [management_pb2.Node(id=leader, state=common_pb2.NODE_STATE_UP)]
    result = run_ctl_main("nodes", "--json")
    assert result.code == 0, result.err
    assert [node["id"] for node in json.loads(result.out)] == [leader]
    assert ctl_cluster.received("GetNodes") == [management_pb2.GetNodesRequest()] * 2


def test_ctl_cluster_refuses_as_the_test_says(
    ctl_cluster: FakeCtlCluster, run_ctl_main: RunMain
) -> None:
    ctl_cluster.refusals["GetNodes"] = (grpc.StatusCode.PERMISSION_DENIED, "not yours")
    result = run_ctl_main("nodes")
    assert (result.code, result.out) == (1, "")
    assert result.err == "roleserve ctl: error: listing the nodes: not yours (PERMISSION_DENIED)\n"


def test_run_roleserve_main_returns_usage_errors_as_results(run_roleserve_main: RunMain) -> None:
    result = run_roleserve_main("ctl")
    assert (result.code, result.out) == (2, "")
    assert result.err.splitlines()[-1] == (
        "roleserve ctl: error: the following arguments are required: COMMAND"
    )


def test_load_installed_plugin_names_what_is_missing_and_how_to_install_it() -> None:
    with pytest.raises(LookupError) as raised:
        load_installed_plugin("nonexistent")
    assert str(raised.value) == (
        "no installed plugin 'nonexistent' (entry point group roleserve.plugins); its entry "
        "point exists only once it is installed: in its directory, uv pip install -e ."
    )


@pytest.mark.anyio
async def test_wait_for_value_returns_the_first_accepted_value() -> None:
    value: Value[int] = Value()
    value.set(1)

    async def producer() -> None:
        for number in (2, 3, 4):
            await anyio.wait_all_tasks_blocked()
            value.set(number)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(producer)
        assert await wait_for_value(value, lambda n: n % 3 == 0) == 3


@pytest.mark.anyio
async def test_wait_for_value_times_out() -> None:
    value: Value[int] = Value()
    with pytest.raises(TimeoutError):
        await wait_for_value(value, timeout=0.01)


@pytest.mark.anyio
async def test_wait_for_state_timeout_names_the_dn_and_its_last_status(
    supervisor_runner: SupervisorRunner,
) -> None:
    async def never_healthy(ctx: RunContext) -> None:
        ctx.set_note("stuck on purpose")
        await anyio.sleep_forever()

    supervisor = await supervisor_runner.start(never_healthy)
    await supervisor.wait_status("root", lambda status: status.note != "")
    with pytest.raises(TimeoutError, match=r"root did not reach.*stuck on purpose"):
        await wait_for_state(supervisor, "root", State.HEALTHY, timeout=0.01)
    with pytest.raises(TimeoutError, match=r"root\.missing.*does not exist"):
        await wait_for_state(supervisor, "root.missing", timeout=0.01)


def test_installed_example_plugin_lists_its_workers(tmp_path: Path) -> None:
    info = load_installed_plugin("hello")
    assert (info.state, info.workers, info.values) == (
        PluginState.LOADED,
        ["hello", "hello_neighbours"],
        ["hello_greeting", "hello_neighbours"],
    )


def test_an_event_loop_lingers_after_its_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """grpc.aio may hand a test's loop an event just after the test: a closed loop would
    raise "Event loop is closed" in the next test, a lingering one queues it harmlessly."""
    monkeypatch.setattr(LingeringEventLoop, "closing", [])  # the session's own stay put
    loops = [LingeringEventLoop() for _ in range(LINGER + 1)]
    try:
        first = loops[0]
        first.close()
        first.call_soon_threadsafe(lambda: None)  # a late event from grpc's poller thread
        for newer in loops[1:LINGER]:
            newer.close()
        assert not first.is_closed()
        loops[LINGER].close()
        assert first.is_closed()
        assert [loop.is_closed() for loop in loops[1:]] == [False] * LINGER
    finally:
        close_lingering_loops()
    assert all(loop.is_closed() for loop in loops)


# -- the harness is strict ------------------------------------------------------------------

PLUGINS_DIR = Path(__file__).parent / "plugins"


def roleserve_worker(node: NodeContext) -> list[Worker]:
    """roleserve_workers, misspelled."""
    return []


def test_a_misspelled_hook_fails_the_harness_at_once_with_the_hook_meant(tmp_path: Path) -> None:
    """Not a worker that never starts and a wait that times out: the one line to fix."""
    harness = PluginHarness()
    harness.register(SimpleNamespace(roleserve_worker=hookimpl(roleserve_worker)), "typo")
    with pytest.raises(PluginLoadError) as caught:
        harness.runtime(tmp_path)
    assert str(caught.value) == (
        "plugin 'typo' (tests/test_testing_kit.py): implements 'roleserve_worker', which no "
        "loaded plugin defines; did you mean 'roleserve_workers'? (mark it "
        "@hookimpl(optionalhook=True) if it belongs to an optional plugin)"
    )


def test_a_hook_module_without_the_api_marker_fails_the_harness_with_the_line_to_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the plugin's entry point would load, so what it needs: ROLESERVE_PLUGIN_API."""
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    module = importlib.import_module("no_api")
    with pytest.raises(PluginAPIVersionError) as caught:
        PluginHarness().register(module, "no_api")
    assert str(caught.value) == (
        "plugin 'no_api' (tests/plugins/no_api.py) failed: does not declare the plugin API it "
        "was written for; add the line `ROLESERVE_PLUGIN_API = 1` to tests/plugins/no_api.py"
    )


def test_a_lenient_harness_records_what_a_strict_one_raises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS_DIR))
    harness = PluginHarness(strict=False)
    failed = harness.register(importlib.import_module("no_api"), "no_api")
    typo = harness.register(SimpleNamespace(roleserve_worker=hookimpl(roleserve_worker)), "typo")
    harness.runtime(tmp_path)
    assert (failed.state, typo.state, len(typo.warnings)) == (
        PluginState.FAILED,
        PluginState.LOADED,
        1,
    )
