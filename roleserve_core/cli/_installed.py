"""What is installed, read from the distributions' metadata directories without
``importlib.metadata``: for ``roleserve --version`` and ``roleserve ctl --help``.

Why not ``importlib.metadata``: importing it costs about twice a bare interpreter's start
(it loads ``email``, ``zipfile``, ``csv``, ``typing``...), which alone would break the
promise that these answer at once (``benchmarks/cli.py``). What they need is small and
fixed by the packaging specs: a ``NAME-VERSION.dist-info`` directory per distribution on
``sys.path`` (the version in its ``METADATA``), and its ``entry_points.txt``, an INI file.
The older ``NAME[-VERSION...].egg-info`` directories (``setup.py develop``, a legacy
editable install, distributions' system packages) are read alike (``PKG-INFO``): without
them such a plugin's ``ctl`` command would be not only unlisted but unknown.

Found as ``importlib.metadata`` finds them: the path entries in order, the first
distribution of a (normalized) name wins. Left out on purpose: zips on the path, single-file
``.egg-info`` (old distutils, which declare no entry points) and custom finders, which no
installer of today (pip, uv) makes for a plugin. For them ``version`` says None and
``--version`` asks ``importlib.metadata``; their ``ctl`` commands are not listed nor run
(tests/test_cli_imports.py checks that this reader and ``importlib.metadata`` agree on what
is installed here, and on an ``.egg-info``).
"""

from __future__ import annotations

import os
import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["EntryPoint", "entry_points", "version"]

SUFFIXES = {".dist-info": "METADATA", ".egg-info": "PKG-INFO"}
"""A metadata directory's suffix, and the file of its headers (name, version)."""


class EntryPoint:
    """One entry point: its name, its ``module:attribute`` value, and the name of the
    distribution that declares it (as its metadata spells it)."""

    __slots__ = ("distribution", "name", "value")

    def __init__(self, name: str, value: str, distribution: str) -> None:
        self.name = name
        self.value = value
        self.distribution = distribution


def _normalized(name: str) -> str:
    """A distribution's name as directory names compare (PEP 503, ``-`` as ``_``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _distributions() -> Iterator[str]:
    """The metadata directory (``.dist-info``, ``.egg-info``) of each distribution on
    ``sys.path``: the first of each name only."""
    seen: set[str] = set()
    for entry in sys.path:
        try:
            children = os.listdir(entry or ".")
        except OSError:  # not a directory (a zip), or gone
            continue
        for child in children:
            if _suffix(child) is None:
                continue
            name = _normalized(_name(child))
            if name not in seen:
                seen.add(name)
                yield os.path.join(entry or ".", child)


def _suffix(child: str) -> str | None:
    """``child``'s suffix if it names a metadata directory (a key of ``SUFFIXES``)."""
    lowered = child.lower()
    return next((suffix for suffix in SUFFIXES if lowered.endswith(suffix)), None)


def _name(child: str) -> str:
    """The distribution's name in a metadata directory's name (before its first ``-``)."""
    return child.rpartition(".")[0].partition("-")[0]


def _metadata_field(directory: str, field: str) -> str | None:
    """``field`` of the directory's ``METADATA`` or ``PKG-INFO`` (its headers, before the
    first blank line)."""
    headers = SUFFIXES[_suffix(directory) or ".dist-info"]
    try:
        with open(os.path.join(directory, headers), encoding="utf-8") as metadata:
            for line in metadata:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key.strip().lower() == field.lower():
                    return value.strip()
    except (OSError, UnicodeDecodeError):
        return None
    return None


def version(distribution: str) -> str | None:
    """The installed version of ``distribution``; None if not found here."""
    wanted = _normalized(distribution)
    for directory in _distributions():
        if _normalized(_name(os.path.basename(directory))) == wanted:
            return _metadata_field(directory, "Version")
    return None


def entry_points(group: str) -> list[EntryPoint]:
    """Every entry point of ``group``, of every distribution on the path."""
    found = []
    for directory in _distributions():
        for name, value in _group(os.path.join(directory, "entry_points.txt"), group):
            distribution = _metadata_field(directory, "Name") or os.path.basename(directory)
            found.append(EntryPoint(name, value, distribution))
    return found


def _group(path: str, group: str) -> Iterator[tuple[str, str]]:
    """The ``name = value`` lines of the section ``[group]`` of an ``entry_points.txt``."""
    try:
        with open(path, encoding="utf-8") as text:
            lines = text.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    section = None
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == group and "=" in line:
            name, _, value = line.partition("=")
            yield name.strip(), value.strip()
