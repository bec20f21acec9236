"""The documentation says what the code does: generated parts are current, links resolve."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pluggy

from roleserve_core import docgen, hookspecs
from roleserve_core.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
SPEC_MARKER = f"{hookspecs.PROJECT}_spec"


def hookspec_names() -> list[str]:
    """Every function of the hookspecs module marked @hookspec, in definition order."""
    return [
        name
        for name, obj in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(obj, SPEC_MARKER)
    ]


def test_generated_docs_are_current() -> None:
    stale = [
        str(path.relative_to(ROOT))
        for path, content in docgen.expected_files(ROOT).items()
        if not path.exists() or path.read_text() != content
    ]
    assert stale == [], "run: .venv/bin/python -m roleserve_core.docgen"


def test_every_hook_is_in_exactly_one_phase() -> None:
    phased = [name for _, names in hookspecs.HOOK_PHASES for name in names]
    assert sorted(phased) == sorted(hookspec_names())
    assert len(set(phased)) == len(phased)


def test_every_hook_is_documented_with_its_exact_signature() -> None:
    reference = (ROOT / "docs" / "hooks.md").read_text()
    for name in hookspec_names():
        signature = docgen.hook_signature(getattr(hookspecs, name))
        assert f"### `{signature}`" in reference, name


def test_every_hook_has_a_test_named_after_it() -> None:
    sources = "\n".join(path.read_text() for path in (ROOT / "tests").rglob("test_*.py"))
    missing = [
        name for name in hookspec_names() if not re.search(rf"def test_hook_{name}\b", sources)
    ]
    assert missing == []


def test_hookspec_docstrings_have_one_shape() -> None:
    for name in hookspec_names():
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        spec = inspect.signature(getattr(hookspecs, name))
        for parameter in spec.parameters:
            assert f":param {parameter}:" in doc, (name, parameter)
        assert ":returns:" in doc, name
        assert "Called " in doc, name
        assert "raises" in doc, name
        assert "Implement it" in doc, name


def test_pluggy_accepts_the_specs() -> None:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    assert sorted(hookspec_names()) == sorted(
        name for name, caller in vars(manager.hook).items() if caller.spec is not None
    )


def test_relative_links_resolve() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
    assert broken == []


def test_readme_gives_two_commands_that_the_dev_script_has() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["./dev roleserve cluster up --nodes 3", "./dev test"]
    script = (ROOT / "dev").read_text()
    for command in commands:
        assert f"    {command.split()[1]})" in script, command
    # The run command is a real command line of the CLI, not a sketch of one.
    arguments = build_parser().parse_args(commands[0].split()[2:])
    assert (arguments.nodes, arguments.detach) == (3, False)
