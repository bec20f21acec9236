"""pyroute2's ``IPRoute`` and ``NetlinkError`` without the rest of pyroute2.

``import pyroute2`` (and so any ``from pyroute2.x import y``) runs the package's
``__init__``, which imports every part of pyroute2: NDB, IPDB, conntrack, nftables, IPVS,
generic netlink families, 163 modules, 0.3 s of CPU with bytecode cached. clusternet needs
``IPRoute`` and ``NetlinkError``, 99 of them, half that time. While a 100-node ``--netns``
cluster started on 2 cores, pyroute2's import was a quarter of a node's Python time, as
much as the core's whole daemon.

So the package's module is made without running its ``__init__``
(``importlib.util.module_from_spec``: it has its ``__path__``, and its submodules import
as usual), and the first access to any other name of it (``from pyroute2 import NDB``,
anyone's; a submodule's name imports the submodule) runs the ``__init__`` then,
through the module's ``__getattr__`` (PEP 562): the package stays whole for every other
user in the process. Where pyroute2 was imported
already, this is plain importing.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from importlib.abc import Loader
from types import ModuleType
from typing import Any

__all__ = ["ip_route_class", "netlink_error"]

PACKAGE = "pyroute2"

_lock = threading.RLock()


def ip_route_class() -> Any:
    """``pyroute2.IPRoute``."""
    _package()
    from pyroute2.iproute.linux import IPRoute

    return IPRoute


def netlink_error() -> Any:
    """``pyroute2.NetlinkError`` (its ``code`` is the errno)."""
    _package()
    from pyroute2.netlink.exceptions import NetlinkError

    return NetlinkError


def _package() -> None:
    """Put pyroute2's package module in ``sys.modules`` without running its ``__init__``
    (see the module docstring), unless it is there already."""
    with _lock:
        if PACKAGE in sys.modules:
            return
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.loader is None:
            import pyroute2  # noqa: F401 (raises the ImportError that says it is missing)

            return
        package = importlib.util.module_from_spec(spec)
        package.__getattr__ = _whole_on_first_use(package, spec.loader)  # type: ignore[method-assign]
        sys.modules[PACKAGE] = package


def _whole_on_first_use(package: ModuleType, loader: Loader) -> Any:
    """The package's ``__getattr__``: a submodule's name imports that submodule (as the
    ``__init__`` would have); any other name runs the ``__init__``, once, under the lock
    (another thread asking meanwhile waits for it, as for any import), then answers. A
    failed ``__init__`` takes the package out of ``sys.modules``, as a failed import does,
    so that the next import tries again."""
    running = threading.local()

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's name, PEP 562)
        if importlib.util.find_spec(f"{PACKAGE}.{name}") is not None:
            return importlib.import_module(f"{PACKAGE}.{name}")
        with _lock:
            if getattr(running, "now", False):
                raise AttributeError(name)  # asked by the __init__ itself, as it runs
            if vars(package).get("__getattr__") is __getattr__:
                running.now = True
                try:
                    loader.exec_module(package)
                except BaseException:
                    sys.modules.pop(PACKAGE, None)
                    raise
                finally:
                    running.now = False
                del package.__getattr__
        try:
            return vars(package)[name]
        except KeyError:
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}") from None

    return __getattr__
