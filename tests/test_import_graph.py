"""roleserve_core's import graph: no circle, and no arrow from a lower layer to a higher one.

A circle of imports is one concept spread over several modules: none of them can be read,
tested or moved alone, and the order they load in decides whether an import works. An
arrow up the layers is the start of one. The layers are ``LAYERS`` below, lowest first;
docs/architecture.md ("Layers") shows the same table, and a test here checks they agree.

The graph is read from the sources with ``ast``; nothing is imported, so it takes a
fraction of a second. Every import counts: at module level, under ``if TYPE_CHECKING:`` and
inside functions, since each is a dependency a reader has to follow, and hiding one from
the interpreter is how a knot is held apart, not how it is undone. Relative imports are
resolved, and ``from package import name`` is an arrow to ``package.name`` when that is a
module, else to ``package``. Importing a module also runs its packages' ``__init__``; that
implicit arrow is not counted (a package's ``__init__`` re-exports its own modules).

``python tests/test_import_graph.py`` prints the graph's summary: its cycles and its upward
arrows, each arrow with the line of its import.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
CORE = REPOSITORY / "roleserve_core"
ARCHITECTURE = REPOSITORY / "docs" / "architecture.md"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "primitives",
        (
            "_moved",
            "_public",
            "address",
            "clock",
            "config",
            "environment",
            "errors",
            "event",
            "files",
            "limits",
            "logtree",
            "memory",
            "ports",
            "proto",
            "rundir",
            "stats",
            "text",
            "version",
        ),
    ),
    ("mechanisms", ("access", "datadir", "identity", "process", "rpc", "supervisor")),
    ("state", ("clusternodes", "keys", "registry", "roles", "settings", "settingsclass", "values")),
    ("plugin API", ("hookspecs", "node")),
    ("plugin loading", ("docgen", "plugin_loader", "plugin_problems", "plugins", "runtime")),
    (
        "the node",
        ("builtin", "connection", "daemon", "enrolment", "service_nodemanagement", "workers"),
    ),
    (
        "tools",
        (
            "__main__",
            "cli",
            "cluster_extension",
            "clusterplugin",
            "ctl_extension",
            "ctlplugin",
            "localcluster",
        ),
    ),
    ("facade and test kit", ("__init__", "testing")),
)
"""Each layer's modules and packages (a package holds its submodules), by their names in
``roleserve_core``; ``__init__`` is the package itself, the plugin API's facade. A module
imports only from its own layer and those before it."""

SUPERVISOR_TRIO = frozenset(
    {
        "roleserve_core.supervisor._api",
        "roleserve_core.supervisor._node",
        "roleserve_core.supervisor._supervisor",
    }
)
"""The supervisor's private trio, one concept split by role (what a runnable sees, the tree
node, the logic), behind ``supervisor/__init__.py``: it may stay a circle (issue 29)."""

ALLOWED_CYCLES = (SUPERVISOR_TRIO,)


@dataclass(frozen=True, order=True)
class Arrow:
    """``source`` imports ``target`` (its first such import is on ``line``)."""

    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


Graph = Mapping[str, tuple[Arrow, ...]]
"""Every module of the package, with the arrows leaving it."""


def module_names(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (a directory) by its dotted name."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def import_graph(package: Path = CORE) -> Graph:
    """The import graph of ``package``: arrows to its own modules only."""
    modules = module_names(package)
    return {name: tuple(_arrows(name, path, modules)) for name, path in sorted(modules.items())}


def _arrows(name: str, path: Path, modules: Mapping[str, Path]) -> Iterator[Arrow]:
    """One arrow per module ``name`` imports, with the line of its first import."""
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    first: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for imported in _imported(node, here, modules):
            target = _owning_module(imported, modules)
            if target is not None and target != name:
                first[target] = min(first.get(target, node.lineno), node.lineno)
    for target, line in sorted(first.items()):
        yield Arrow(name, target, line)


def _imported(
    node: ast.Import | ast.ImportFrom, here: str, modules: Mapping[str, Path]
) -> list[str]:
    """The dotted names an import statement imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = here.split(".")[: len(here.split(".")) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    return [
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
        for alias in node.names
    ]


def _owning_module(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module ``name`` is or lies in; None outside the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def cycles(graph: Graph) -> list[frozenset[str]]:
    """The circles of the graph: each set of modules that all reach each other (Tarjan's
    strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for arrow in graph[module]:
            if arrow.target not in index:
                visit(arrow.target)
                low[module] = min(low[module], low[arrow.target])
            elif arrow.target in stack:
                low[module] = min(low[module], index[arrow.target])
        if low[module] == index[module]:
            component = {stack.pop()}
            while module not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(frozenset(component))

    for module in graph:
        if module not in index:
            visit(module)
    return sorted(found, key=sorted)


def arrows_within(graph: Graph, modules: frozenset[str]) -> list[Arrow]:
    """The arrows that make a circle of ``modules``."""
    return [arrow for m in sorted(modules) for arrow in graph[m] if arrow.target in modules]


def layer_of(module: str, layers: Iterable[tuple[str, tuple[str, ...]]] = LAYERS) -> int | None:
    """The index of the layer ``module`` belongs to (by its longest listed prefix)."""
    name = module.partition(".")[2] or "__init__"
    best: tuple[int, int] | None = None
    for number, (_, members) in enumerate(layers):
        for member in members:
            if (name == member or name.startswith(member + ".")) and (
                best is None or len(member) > best[0]
            ):
                best = (len(member), number)
    return None if best is None else best[1]


def upward_arrows(graph: Graph) -> list[Arrow]:
    """The arrows from a lower layer to a higher one."""
    return [
        arrow
        for arrows in graph.values()
        for arrow in arrows
        if (layer_of(arrow.source) or 0) < (layer_of(arrow.target) or 0)
    ]


def across_layers(arrow: Arrow) -> str:
    """The arrow, and the layers it runs between."""
    source, target = (LAYERS[layer_of(m) or 0][0] for m in (arrow.source, arrow.target))
    return f"{arrow}: {source} -> {target}"


def summary(graph: Graph) -> str:
    """The graph in a few lines: its size, its cycles and its upward arrows."""
    arrows = sum(len(leaving) for leaving in graph.values())
    lines = [f"roleserve_core: {len(graph)} modules, {arrows} arrows (module imports module)"]
    found = cycles(graph)
    lines.append(f"cycles: {len(found)}")
    for cycle in found:
        allowed = " (allowed)" if cycle in ALLOWED_CYCLES else ""
        lines.append(f"  {', '.join(sorted(cycle))}{allowed}")
        lines += [f"    {arrow}" for arrow in arrows_within(graph, cycle)]
    upward = upward_arrows(graph)
    lines.append(f"upward arrows: {len(upward)}")
    lines += [f"  {across_layers(arrow)}" for arrow in upward]
    return "\n".join(lines)


# -- roleserve_core ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph()


def test_no_cycle_but_the_allowed_ones(graph: Graph) -> None:
    found = [cycle for cycle in cycles(graph) if cycle not in ALLOWED_CYCLES]
    assert found == [], "import cycles:\n" + "\n".join(
        f"{', '.join(sorted(cycle))}:\n" + "\n".join(f"  {a}" for a in arrows_within(graph, cycle))
        for cycle in found
    )


def test_every_allowed_cycle_is_still_there(graph: Graph) -> None:
    gone = [sorted(cycle) for cycle in ALLOWED_CYCLES if cycle not in cycles(graph)]
    assert gone == [], "no longer a cycle: remove it from ALLOWED_CYCLES"


def test_no_import_runs_up_the_layers(graph: Graph) -> None:
    upward = upward_arrows(graph)
    assert upward == [], "imports from a lower layer to a higher one:\n" + "\n".join(
        f"  {across_layers(arrow)}" for arrow in upward
    )


def test_every_module_is_in_a_layer_and_every_entry_names_one(graph: Graph) -> None:
    assert [module for module in graph if layer_of(module) is None] == []
    named = {member.partition(".")[0] for _, members in LAYERS for member in members}
    present = {module.partition(".")[2].partition(".")[0] or "__init__" for module in graph}
    assert sorted(named - present) == []


def test_the_architecture_page_shows_the_layers() -> None:
    assert documented_layers(ARCHITECTURE.read_text()) == [
        (name, sorted(members)) for name, members in LAYERS
    ]


def documented_layers(text: str) -> list[tuple[str, list[str]]]:
    """The rows of the table under docs/architecture.md's "Layers": ``| N | name | `a`, `b` |``."""
    section = text.partition("\n## Layers\n")[2].partition("\n## ")[0]
    rows = re.findall(r"^\| \d+ \| ([^|]+?) \| (.+?) \|$", section, flags=re.MULTILINE)
    return [(name, sorted(re.findall(r"`([^`]+)`", members))) for name, members in rows]


# -- the checks themselves, on a package of a few lines ------------------------------------


def _package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_every_kind_of_import_is_an_arrow(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": (
                "from typing import TYPE_CHECKING\n"
                "import pkg.b\n"
                "if TYPE_CHECKING:\n"
                "    from pkg.c import C\n"
                "def f():\n"
                "    from . import d\n"
                "from .sub import e\n"
                "from pkg.sub import Name\n"
                "import os\n"
            ),
            "b.py": "from .a import x\nfrom .a import y\n",
            "c.py": "",
            "d.py": "",
            "sub/__init__.py": "from ..c import C\n",
            "sub/e.py": "from .. import c\n",
        },
    )
    assert import_graph(package) == {
        "pkg": (),
        "pkg.a": (
            Arrow("pkg.a", "pkg.b", 2),
            Arrow("pkg.a", "pkg.c", 4),
            Arrow("pkg.a", "pkg.d", 6),
            Arrow("pkg.a", "pkg.sub", 8),
            Arrow("pkg.a", "pkg.sub.e", 7),
        ),
        "pkg.b": (Arrow("pkg.b", "pkg.a", 1),),
        "pkg.c": (),
        "pkg.d": (),
        "pkg.sub": (Arrow("pkg.sub", "pkg.c", 1),),
        "pkg.sub.e": (Arrow("pkg.sub.e", "pkg.c", 1),),
    }


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "import pkg.b\n",
            "b.py": "def f():\n    import pkg.c\n",
            "c.py": "from pkg import a\n",
            "d.py": "import pkg.a\n",
        },
    )
    graph = import_graph(package)
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b", "pkg.c"})]
    assert arrows_within(graph, cycles(graph)[0]) == [
        Arrow("pkg.a", "pkg.b", 1),
        Arrow("pkg.b", "pkg.c", 2),
        Arrow("pkg.c", "pkg.a", 1),
    ]


def test_an_arrow_up_the_layers_is_found() -> None:
    graph = {
        "roleserve_core.values": (Arrow("roleserve_core.values", "roleserve_core.hookspecs", 9),),
        "roleserve_core.hookspecs": (Arrow("roleserve_core.hookspecs", "roleserve_core.node", 3),),
        "roleserve_core.node": (),
    }
    assert upward_arrows(graph) == [Arrow("roleserve_core.values", "roleserve_core.hookspecs", 9)]
    assert "roleserve_core.values -> roleserve_core.hookspecs (line 9): state -> plugin API" in (
        summary(graph)
    )


def test_a_module_belongs_to_its_longest_listed_prefix() -> None:
    layers = (("low", ("cli.table",)), ("high", ("cli",)))
    assert layer_of("roleserve_core.cli.table", layers) == 0
    assert layer_of("roleserve_core.cli.tablet", layers) == 1
    assert layer_of("roleserve_core", layers) is None


if __name__ == "__main__":
    print(summary(import_graph(Path(sys.argv[1]) if len(sys.argv) > 1 else CORE)))
