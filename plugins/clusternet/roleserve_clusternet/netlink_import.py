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
anyone's; not a submodule's name, which imports the submodule) runs the ``__init__`` then,
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
    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's name, PEP 562)
        if importlib.util.find_spec(f"{PACKAGE}.{name}") is not None:
            # A submodule not imported yet (``from pyroute2 import config``, as pyroute2's
            # own modules write it): "no such attribute" makes the import system import it.
            raise AttributeError(name)
        with _lock:
            if "__getattr__" in vars(package):
                del package.__getattr__
                loader.exec_module(package)
        return getattr(package, name)

    return __getattr__
