"""A runnable whose code is imported when it first runs: what keeps a node as light as the
roles it holds.

::

    hook module (light)                       worker module (heavy: etcd client, aiohttp, ...)
    Worker("kubelet",                          async def run(ctx, node, settings): ...
           lazy_runnable("pkg.worker_kubelet:run", node, settings),
           when=has_worker_role, doc="...")
        │  first call, when the role first comes:
        └──import pkg.worker_kubelet──▶ run(ctx, node, settings)

Every module a node imports stays in its memory for the life of the process, whatever it
runs. A plugin's hook module is imported on every node that has the plugin installed, and
by ``roleserve plugins`` and ``roleserve node config`` as well, so whatever it imports at
its top every node pays for. ``lazy_runnable`` names the function by its module and name
instead (as an entry point does), so the module and everything it imports load when the
supervisor first starts the runnable: for a gated worker, when the node first holds the
role. Later starts (restarts, the role given again) reuse the loaded function.

What is given up: the function is a string, so a type checker does not check it or its
arguments. ``resolve()`` imports it, which a plugin's tests call to find a misspelled
target, and a worker's one-line doc must be given with it (``Worker(doc=...)``), since
reading the function's docstring would import it.

An import that fails at the first start (a dependency not installed, a broken module) is
the runnable's failure, not the node's: ``RunnableImportError``, one line naming the target
and the missing module, and final (``FinalError``): restarting imports the same files again,
so the runnable stays DEAD until the operator installs what is missing and restarts it.
What was installed through a new path file (``.pth``: an editable install) is found only by
a new node process: Python reads those files when it starts.

The import runs on the event loop's thread, as an import at the top of a module would have
run while the node started: a first start of a role costs its import time once.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from roleserve_core.errors import FinalError, SupervisorError
from roleserve_core.supervisor._api import RunContext

__all__ = ["LazyRunnable", "RunnableImportError", "lazy_runnable"]


class RunnableImportError(SupervisorError, FinalError):
    """A lazy runnable's module could not be imported, or lacks the function it names.

    Final: the node keeps running, the runnable stays DEAD with this one line as its note,
    until the operator installs what is missing and restarts it.
    """


class LazyRunnable:
    """A runnable that imports ``module:function`` on its first call, then awaits
    ``function(ctx, *args, **kwargs)``; made by ``lazy_runnable``."""

    __slots__ = ("_failed", "_function", "args", "kwargs", "target")

    def __init__(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        module, _, name = target.partition(":")
        if not module or not name.isidentifier():
            raise ValueError(f"lazy_runnable target {target!r} must be 'package.module:function'")
        self.target = target
        """``package.module:function``, as given."""
        self.args = args
        self.kwargs = kwargs
        self._function: Callable[..., Awaitable[None]] | None = None
        self._failed = False

    @property
    def loaded(self) -> bool:
        """Whether the function was imported (by a first run or ``resolve``)."""
        return self._function is not None

    def resolve(self) -> Callable[..., Awaitable[None]]:
        """Import the module and return the function (once; later calls reuse it).

        Plugin tests call it to check the target without running the worker.

        :raises RunnableImportError: the module cannot be imported, or has no such function,
            or the function is not ``async``.
        """
        return self._resolve("DN")

    def _resolve(self, dn: str) -> Callable[..., Awaitable[None]]:
        """``resolve``, its failure naming ``dn`` (the runnable's, when it runs) in the
        command that restarts it."""
        if self._function is None:
            module_name, _, name = self.target.partition(":")
            if self._failed:
                # Tried again after the operator installed what was missing: the import
                # system caches what it found missing (a path directory that did not
                # exist yet) until told to look again.
                importlib.invalidate_caches()
            self._failed = True
            module = _import(self.target, module_name, dn)
            function = getattr(module, name, None)
            if not callable(function):
                raise RunnableImportError(
                    f"cannot run {self.target}: module {module_name} has no function {name!r}"
                )
            if not inspect.iscoroutinefunction(function):
                raise RunnableImportError(
                    f"cannot run {self.target}: {name} is not an async function; a runnable "
                    f"is `async def {name}(ctx, ...)`"
                )
            self._function = function
            self._failed = False
        return self._function

    async def __call__(self, ctx: RunContext) -> None:
        await self._resolve(ctx.dn)(ctx, *self.args, **self.kwargs)

    def __repr__(self) -> str:
        return f"lazy_runnable({self.target!r})"


def _import(target: str, module_name: str, dn: str) -> ModuleType:
    """``module_name``, imported; why not, in one line.

    A missing module that is the target's own (or one of its packages) is most likely a
    misspelt target; any other is a dependency of the target's module that is not
    installed. Any other failure, not only ImportError, is the module's own (a SyntaxError,
    a check at its top): it fails the same way at every restart, so it is final too.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name + ".").startswith(missing + "."):
            raise RunnableImportError(
                f"cannot import {target}: there is no module {missing!r}; check the target's "
                "spelling in the plugin's hooks, or install the package that provides it"
            ) from exc
        raise _cannot_import(target, exc, f"install what is missing, {_restart(dn)}") from exc
    except ImportError as exc:
        raise _cannot_import(target, exc, f"install what is missing, {_restart(dn)}") from exc
    except Exception as exc:
        raise _cannot_import(target, exc, f"fix it, {_restart(dn)}") from exc


def _restart(dn: str) -> str:
    """How to restart the runnable at ``dn``. The node stays ``NODE``: a supervisor does
    not know its node's ID, and the operator reads this through ``ctl tree NODE``, with the
    ID just typed; a new node process reads the installed files anew as well."""
    return f"then restart it: roleserve ctl restart NODE {dn}"


def _cannot_import(target: str, error: Exception, fix: str) -> RunnableImportError:
    return RunnableImportError(
        f"cannot import {target}: {type(error).__name__}: {_first_line(error)} ({fix})"
    )


def _first_line(error: BaseException) -> str:
    """The first line of ``error``'s message: some libraries' import errors span
    paragraphs, and a runnable's note is one line."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def lazy_runnable(target: str, /, *args: Any, **kwargs: Any) -> LazyRunnable:
    """A runnable that imports its code when it first runs, not now.

    ``target`` is ``"package.module:function"``; the function is ``async def
    function(ctx: RunContext, *args, **kwargs) -> None``, a runnable taking the arguments
    given here after its context. Use it as a ``Worker``'s ``run`` (give the worker
    ``doc=``: its docstring is not read, which would import it) or as a child
    (``ctx.run(name, lazy_runnable(...))``).

    :raises ValueError: ``target`` is not of that form (checked now; the import is not).
    """
    return LazyRunnable(target, args, kwargs)
