"""``lazy_runnable``: a worker's module is imported when the worker first starts, not when
its plugin's hooks build it; a failed import is that worker's final failure, one line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from roleserve_core import (
    KubernetesWorker,
    LazyRunnable,
    NodeRoles,
    RunnableImportError,
    State,
    Worker,
    lazy_runnable,
)
from roleserve_core.errors import FinalError, InvalidWorkerError
from roleserve_core.hookspecs import hookimpl
from roleserve_core.supervisor import FAILED_FOR_GOOD
from roleserve_core.testing import NodeHarness, PluginHarness

StartNode = Callable[..., Awaitable[NodeHarness]]

MODULE = "lazy_worker_under_test"
"""A module written for each test, on a path of its own: imported only by the worker."""

RAISING = "lazy_worker_raising"
"""A module beside it that raises at its top, on a message of two lines."""

SOURCE = '''
import anyio

STARTS = []

async def run(ctx, greeting, *, times):
    """Its docstring, which the worker's doc does not come from."""
    STARTS.append((greeting, times))
    ctx.signal_healthy()
    await anyio.sleep_forever()

def plain(ctx):
    """Not async: not a runnable."""
'''

BROKEN = "lazy_worker_broken"
"""A module beside ``MODULE`` that imports a dependency that is not installed."""


@pytest.fixture
def worker_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``lazy_worker_under_test`` on ``sys.path``, not imported; forgotten after the test."""
    directory = tmp_path / "lib"
    directory.mkdir()
    path = directory / f"{MODULE}.py"
    path.write_text(SOURCE)
    (directory / f"{BROKEN}.py").write_text("import lazy_dependency_nowhere\n")
    (directory / f"{RAISING}.py").write_text(
        'raise RuntimeError("this module refuses to load\\nsecond line")\n'
    )
    monkeypatch.syspath_prepend(str(directory))
    yield path
    sys.modules.pop(MODULE, None)
    sys.modules.pop(RAISING, None)


def is_worker(roles: NodeRoles) -> bool:
    return roles.kubernetes_worker is not None


def lazy_worker(target: str = f"{MODULE}:run") -> Worker:
    return Worker(
        "lazy",
        lazy_runnable(target, "hello", times=2),
        when=is_worker,
        doc="A worker whose module loads with its role.",
    )


def register(plugin_manager: PluginHarness, worker: Worker) -> None:
    hooks = SimpleNamespace(roleserve_workers=hookimpl(lambda node: [worker]))
    plugin_manager.register(hooks, "p")


@pytest.mark.anyio
async def test_the_module_is_imported_when_the_role_first_comes_and_reused_after(
    plugin_manager: PluginHarness, node: StartNode, tmp_path: Path, worker_module: Path
) -> None:
    register(plugin_manager, lazy_worker())
    harness = await node(plugin_manager.runtime(tmp_path))
    harness.set_roles(NodeRoles())
    await harness.wait_status("root.role.lazy", lambda status: status.note != "")
    assert MODULE not in sys.modules
    assert harness.runtime.plugins.info("p").workers == ["lazy"]

    harness.set_roles(NodeRoles(kubernetes_worker=KubernetesWorker()))
    await harness.wait_state("root.role.lazy", State.HEALTHY)
    module = sys.modules[MODULE]
    assert module.STARTS == [("hello", 2)]

    harness.set_roles(NodeRoles())
    await harness.wait_state("root.role.lazy", State.NEW)
    harness.set_roles(NodeRoles(kubernetes_worker=KubernetesWorker()))
    await harness.wait_status(
        "root.role.lazy", lambda status: status.state is State.HEALTHY and status.restarts == 1
    )
    assert sys.modules[MODULE] is module  # not imported again
    assert module.STARTS == [("hello", 2), ("hello", 2)]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "lazy_worker_nowhere:run",
            "cannot import lazy_worker_nowhere:run: there is no module 'lazy_worker_nowhere'; "
            "check the target's spelling in the plugin's hooks, or install the package that "
            "provides it",
        ),
        (
            "lazy_worker_nowhere.sub:run",
            "cannot import lazy_worker_nowhere.sub:run: there is no module "
            "'lazy_worker_nowhere'; check the target's spelling in the plugin's hooks, or "
            "install the package that provides it",
        ),
        (
            f"{BROKEN}:run",
            f"cannot import {BROKEN}:run: ModuleNotFoundError: No module named "
            "'lazy_dependency_nowhere' (install what is missing, then restart it: "
            "roleserve ctl restart NODE root.role.lazy)",
        ),
        (
            f"{MODULE}:walk",
            f"cannot run {MODULE}:walk: module {MODULE} has no function 'walk'",
        ),
        (
            f"{MODULE}:plain",
            f"cannot run {MODULE}:plain: plain is not an async function; a runnable is "
            "`async def plain(ctx, ...)`",
        ),
        (
            f"{RAISING}:run",
            f"cannot import {RAISING}:run: RuntimeError: this module refuses to load (fix it, "
            "then restart it: roleserve ctl restart NODE root.role.lazy)",
        ),
    ],
    ids=["no-module", "no-package", "no-dependency", "no-function", "not-async", "raises"],
)
async def test_a_failed_import_fails_that_worker_for_good_in_one_line(
    plugin_manager: PluginHarness,
    node: StartNode,
    tmp_path: Path,
    worker_module: Path,
    target: str,
    message: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The node and its other workers run on; the worker is DEAD, final, its note the line."""
    register(plugin_manager, lazy_worker(target))
    harness = await node(plugin_manager.runtime(tmp_path))
    harness.set_roles(NodeRoles(kubernetes_worker=KubernetesWorker()))
    status = await harness.wait_state("root.role.lazy", State.DEAD)
    assert (status.final, status.note) == (True, message)
    assert status.last_error is not None
    assert status.last_error.type == "roleserve_core.RunnableImportError"
    assert harness.status("root.role").state is State.HEALTHY
    [line] = [r for r in caplog.records if r.getMessage().startswith(FAILED_FOR_GOOD)]
    assert (line.getMessage(), line.exc_info) == (FAILED_FOR_GOOD + message, None)


def test_building_the_worker_imports_nothing_and_needs_a_doc(worker_module: Path) -> None:
    worker = lazy_worker()
    assert (worker.doc, MODULE in sys.modules) == (
        "A worker whose module loads with its role.",
        False,
    )
    with pytest.raises(InvalidWorkerError) as refused:
        Worker("lazy", lazy_runnable(f"{MODULE}:run"))
    assert str(refused.value) == (
        "worker 'lazy': add doc=\"one line\" to its Worker(...), which roleserve plugins "
        "shows: its run is a lazy_runnable, whose docstring would be read only by importing "
        "its module"
    )
    assert isinstance(refused.value, ValueError)  # what it was before it had its own class
    assert MODULE not in sys.modules


def test_resolve_imports_the_function_for_a_plugins_tests(worker_module: Path) -> None:
    run = lazy_runnable(f"{MODULE}:run")
    assert isinstance(run, LazyRunnable)
    assert (run.loaded, repr(run)) == (False, f"lazy_runnable('{MODULE}:run')")
    assert run.resolve() is sys.modules[MODULE].run
    assert run.loaded


def test_resolve_after_a_failure_finds_what_was_installed_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ctl restart`` after installing the missing module: found, though the import
    system had cached its directory as missing (it did not exist at the first try)."""
    installed = tmp_path / "installed later"
    monkeypatch.syspath_prepend(str(installed))
    run = lazy_runnable(f"{MODULE}:run")
    with pytest.raises(RunnableImportError, match="there is no module"):
        run.resolve()
    installed.mkdir()
    (installed / f"{MODULE}.py").write_text(SOURCE)
    try:
        assert run.resolve() is sys.modules[MODULE].run
    finally:
        sys.modules.pop(MODULE, None)


PTH_PROBE = """
import site, sys
from pathlib import Path
from roleserve_core import RunnableImportError, lazy_runnable
site_dir, lib = Path(sys.argv[1]), Path(sys.argv[2])
site.addsitedir(str(site_dir))  # as the interpreter does with site-packages at its start
run = lazy_runnable("{module}:run")
try:
    run.resolve()
except RunnableImportError:
    print("missing")
(site_dir / "later.pth").write_text(str(lib) + "\\n")  # installed since: a new .pth
try:
    run.resolve()
    print("found")
except RunnableImportError:
    print("still missing")
"""


def test_a_dependency_installed_through_a_new_pth_file_needs_a_new_process(
    tmp_path: Path,
) -> None:
    """What the plugin guide says: a path file (``.pth``) is read only when the interpreter
    starts, so what is installed through a new one (an editable install, a package with its
    own directory) is found by a new node process, not by ``ctl restart`` of the worker."""
    site_dir, lib = tmp_path / "site-packages", tmp_path / "elsewhere"
    site_dir.mkdir()
    lib.mkdir()
    (lib / f"{MODULE}.py").write_text(SOURCE)
    probe = PTH_PROBE.format(module=MODULE)
    argv = [sys.executable, "-c", probe, str(site_dir), str(lib)]
    ran = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["missing", "still", "missing"], ran.stderr
    again = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert again.stdout.split() == ["found"], again.stderr  # the .pth read at the start


@pytest.mark.parametrize("target", ["module", "module:", ":run", "module:not a name"])
def test_a_malformed_target_is_refused_at_once(target: str) -> None:
    with pytest.raises(ValueError, match=r"must be 'package\.module:function'"):
        lazy_runnable(target)


def test_an_import_error_is_final() -> None:
    error: Any = RunnableImportError("x")
    assert isinstance(error, FinalError)
