"""Names that moved, still found where an accepted plugin API put them, with a warning.

The plugin API promise (docs/plugin-guide.md, "The plugin API promise"): every module path
and name a plugin could import under plugin API N keeps working while the core accepts
plugin API N. When one moves, its old module answers for it through a module
``__getattr__`` (PEP 562), which Python calls only for a name the module does not define::

    from roleserve_core.keys import ROLES      plugin API 1's path
         │ keys.__getattr__("ROLES")
         ├─▶ PluginAPIDeprecationWarning (a DeprecationWarning): roleserve_core.keys.ROLES
         │   has moved: import ROLES from roleserve_core; ...
         └─▶ roleserve_core.ROLES               the very object, not a copy

Only the old names go through it: a module that still defines a name of its own
(``roleserve_core.values`` holds the core's keys today) answers for it as before, and a
name neither defined nor moved is an ``AttributeError`` as usual, so ``getattr(module,
NAME, default)`` (pluggy's and the loader's checks for optional attributes) works too.

The moved names are left out of ``dir()``: whatever walks a module's members (pluggy
looking for hook implementations, ``inspect.getmembers``) sees the module as it is today
and triggers no warning. The warning is raised each time an old name is looked up, so it
points at every line that uses one (Python's filters show each place once).

A name may also have moved out of the core, to the plugin that owns it (``TO_PLUGINS``):
the core names that place only as a string and imports the plugin at the moment the old
name is looked up, never before, so the core still imports no plugin. Without that plugin
installed the old name is an ``AttributeError`` saying where it went.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping

from roleserve_core.errors import PluginError

# typing only for the annotations: the ``roleserve`` command imports this module at start,
# and importing ``typing`` costs it a tenth of the interpreter's start (benchmarks/cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "TO_PLUGINS",
    "MovedToMissingError",
    "PluginAPIDeprecationWarning",
    "moved_module",
    "moved_names",
]

PACKAGE = "roleserve_core"

TO_PLUGINS: Mapping[str, str] = {
    **{
        name: f"roleserve_kubernetes:{name}"
        for name in ("KUBERNETES_STATUS", "POD_NETWORK", "KubernetesStatus", "PodNetwork")
    },
    "CONTAINERD_METRICS_PORT": "roleserve_kubernetes:CONTAINERD_METRICS_PORT",
    **{
        name: f"roleserve_controlplane:{name}"
        for name in ("ETCD_CLIENT_PORT", "ETCD_PEER_PORT", "ETCD_METRICS_PORT")
    },
    "METRICS_PORT": "roleserve_metrics:METRICS_PORT",
    "NODE_EXPORTER_PORT": "roleserve_metrics:NODE_EXPORTER_PORT",
    "CLUSTERNET_PORT": "roleserve_clusternet:CLUSTERNET_PORT",
}
"""The names the core exported (at its top level, and in ``values``, ``keys`` and
``ports``) that moved to the plugin owning them, and their place there; each plugin
declares them in its top-level API."""


class PluginAPIDeprecationWarning(DeprecationWarning):
    """An old name of an accepted plugin API was used. A ``DeprecationWarning`` (a plugin's
    tests expect that), of its own class so that the plugin loader can tell it from other
    warnings: it records each on the plugin that imported the name, the node logs it, and
    ``roleserve plugins`` lists it, where Python alone would show it to nobody. Exported at
    the top level, to be filtered on."""

    __module__ = PACKAGE  # its public place (see _public.py; this module comes before it)


def moved_names(
    module: str,
    moves: Mapping[str, str],
    api: int,
    otherwise: Callable[[str], Any] | None = None,
) -> Callable[[str], Any]:
    """The ``__getattr__`` for ``module``, whose names in ``moves`` moved while plugin API
    ``api`` is accepted; each maps to its new place, ``"package.module:name"``. Any other
    name goes to ``otherwise`` (a module's own lazy ``__getattr__``), if given: one
    function, so that the warning points at the line using the old name.

    The warning names the new place, so that the fix is in the message, and says until
    when the old name works: while the core accepts plugin API ``api``. It is given once
    per use: ``from package import NAME`` looks the name up twice (the import system's
    ``hasattr``, then the statement's own), and only the statement's look-up, at the
    plugin's line, warns.

    A name that moved to a plugin that is not installed raises ``MovedToMissingError``, an
    ``ImportError`` rather than an ``AttributeError``: ``from package import NAME`` turns an
    ``AttributeError`` into "cannot import name", and the plugin's author would never learn
    where the name went.
    """
    targets = {old: new.partition(":")[::2] for old, new in moves.items()}

    def __getattr__(name: str) -> Any:  # noqa: N807 - the name PEP 562 looks for
        if name not in targets and otherwise is not None:
            return otherwise(name)
        try:
            place, new_name = targets[name]
        except KeyError:
            raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
        found = getattr(_import_moved(module, name, place), new_name)
        if not _looked_up_by_the_import_system():
            warnings.warn(
                f"{module}.{name} has moved: import {new_name} from {_public_place(place, name)}; "
                f"the old name works while roleserve-core accepts plugin API {api}",
                PluginAPIDeprecationWarning,
                stacklevel=2,
            )
        return found

    return __getattr__


class MovedToMissingError(PluginError, ImportError):
    """A name of an accepted plugin API moved to a plugin that is not installed: the
    message names the distribution to install. An ``ImportError`` too, for what a failed
    import raises (a from-import, ``importlib``). Exported at the top level."""

    __module__ = PACKAGE  # its public place (see _public.py; this module comes before it)


def _import_moved(module: str, name: str, place: str) -> Any:
    """The module a name moved to; ``MovedToMissingError`` naming the distribution to
    install if it is a plugin's that is not installed."""
    try:
        return importlib.import_module(place)
    except ModuleNotFoundError as exc:
        if exc.name is None or place.split(".")[0] != exc.name.split(".")[0]:
            raise  # the plugin is there, something it imports is not: not ours to word
        distribution = place.split(".")[0].replace("_", "-")
        raise MovedToMissingError(
            f"{module}.{name} has moved to {place}, which is not installed: install "
            f"{distribution} and import {name} from there"
        ) from exc


def _looked_up_by_the_import_system() -> bool:
    """Whether the name is being looked up by the import system (``_handle_fromlist``'s
    ``hasattr`` for ``from package import NAME``) rather than by a plugin's own line."""
    caller = sys._getframe(2)  # 0: here, 1: __getattr__, 2: who asked
    return caller.f_code.co_filename.startswith("<frozen importlib")


def _public_place(place: str, name: str) -> str:
    """Where to import ``name`` from: the core's top level if it exports it there (the
    plugin API, docs/plugin-guide.md), else ``place``."""
    if place.startswith(f"{PACKAGE}.") and name in getattr(sys.modules.get(PACKAGE), "__all__", ()):
        return PACKAGE
    return place


def moved_module(module: str, new: str, names: Iterable[str], api: int) -> Callable[[str], Any]:
    """The ``__getattr__`` for ``module``, a module path of plugin API ``api`` renamed to
    ``new``: each of ``names`` is the very object of the same name there, with a warning
    naming where to import it from (the core's top level for a name exported there). The
    old module defines nothing of its own, so that nothing is kept twice."""
    return moved_names(module, {name: f"{new}:{name}" for name in names}, api)
