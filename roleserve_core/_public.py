"""Exported classes report the place they are imported from, as trio's do.

A class defined in a private module (``roleserve_core.process._errors``) and exported from a
public one would name the private one wherever Python names a class: a runnable's status
(``roleserve ctl tree``: ``roleserve_core.process._errors.ProgramNotFoundError: ...``),
tracebacks, ``repr`` of the class, pickles. A plugin author reading those would import from
the private module, outside the plugin API. So each public package that re-exports classes
of its private modules calls ``publish`` at its end: each such class then reports
``roleserve_core`` if the core exports it at its top level, else the package itself
(``roleserve_core.rpc``), and the name it is exported under.

It runs at the end of the package's ``__init__``, which imports the private modules first
and is done before any other module of the core can use the package's names, so nothing
the core prints or raises names the private module. A package whose exports load on
first use (``rpc``: a client must not load its server side) has each private module call it
at its own end instead, whichever way that module is first imported; so do ``ctl``'s two
exported classes (``CtlError``, ``CtlSession``), whose package is no public one.
Only ``__module__``, ``__name__`` and ``__qualname__`` change: pickles find the class at its
public place (the top level's lazy ``__getattr__`` answers for it), pluggy and dataclasses
read none of them after the class is made, and type checkers read the source. Runtime
readers of annotations do (``typing.get_type_hints``, and what builds on it: cattrs,
pydantic, typeguard): they evaluate a class's string annotations in the module
``__module__`` names, where its private module's imports are not. So a class's own
annotations are resolved, in its own module, before it is renamed.
tests/test_exports.py checks every exported class and every exception of the core.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["is_private", "publish"]

PACKAGE = "roleserve_core"


def is_private(module: str) -> bool:
    """Whether a module path has a private part (``roleserve_core.rpc._peer``)."""
    return any(part.startswith("_") for part in module.split("."))


def publish(package: str, namespace: Mapping[str, Any], names: Iterable[str]) -> None:
    """Make each class of ``names`` in ``namespace`` (a package's globals and ``__all__``)
    that a private module defines report its public place: ``roleserve_core`` for a name
    the core's top level exports, else ``package``; and the name it is exported under."""
    top = frozenset(getattr(sys.modules[PACKAGE], "__all__", ()))
    for name in names:
        found = namespace.get(name)
        if isinstance(found, type) and is_private(found.__module__):
            _resolve_annotations(found)
            found.__module__ = PACKAGE if name in top else package
            found.__name__ = found.__qualname__ = name


def _resolve_annotations(cls: type) -> None:
    """Replace the string annotations of ``cls`` itself by what they name, read in the
    module that defines it (``from __future__ import annotations`` makes every annotation a
    string). One that cannot be resolved there (a name imported only for type checkers)
    could not be resolved before either: the class is left as it is."""
    own = inspect.get_annotations(cls)
    if not own:
        return
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except (NameError, TypeError):
        return
    cls.__annotations__ = {name: hints.get(name, value) for name, value in own.items()}
