"""``roleserve plugin new NAME``: the distribution of a new plugin, ready to test and build.

What it writes comes from the templates in ``plugin_template/`` (package data, read with
``importlib.resources``), filled in with ``string.Template``; their paths map so::

    plugin_template/pyproject.toml.tmpl        ─▶ DIR/pyproject.toml
    plugin_template/gitignore.tmpl             ─▶ DIR/.gitignore
    plugin_template/package/hooks.py.tmpl      ─▶ DIR/roleserve_NAME/hooks.py
    plugin_template/package/worker.py.tmpl     ─▶ DIR/roleserve_NAME/worker_NAME.py
    plugin_template/tests/test_plugin.py.tmpl  ─▶ DIR/tests/test_NAME.py

Every check comes before the first file is written, and the directory must not exist: a
refused name writes nothing, and nothing is ever overwritten.
"""

from __future__ import annotations

import argparse
import re
import string
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from roleserve_core.cli._failure import report
from roleserve_core.errors import RoleserveError

__all__ = ["NewPlugin", "NewPluginError", "add_parser", "render", "write"]

PLUGIN_NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
"""A plugin's name: also its worker's name, part of its package's and value's names, and
the section ``[plugins.NAME]`` of roleserve.toml."""
MAX_NAME = 24
"""Long enough for a name, short enough for the generated code's lines."""
RESERVED = frozenset({"core"})
"""Names of the built-in plugins, which an installed plugin cannot take."""

TEMPLATES = "plugin_template"
SUFFIX = ".tmpl"


class NewPluginError(RoleserveError):
    """``plugin new`` refuses its arguments or its directory; the message says why."""


@dataclass(frozen=True, slots=True)
class NewPlugin:
    """The names a new plugin's files are made from."""

    name: str
    role: str
    core_version: str
    api: int

    @classmethod
    def checked(cls, name: str, role: str | None, core_version: str, api: int) -> NewPlugin:
        """The plugin, once ``name`` and ``role`` are known to be usable.

        :raises NewPluginError: naming what is wrong and what would do.
        """
        if len(name) > MAX_NAME or not PLUGIN_NAME.fullmatch(name):
            raise NewPluginError(
                f"invalid plugin name {name!r}: use lower case letters, digits and single "
                f"underscores, starting with a letter, at most {MAX_NAME} characters "
                "(it names the package roleserve_NAME, the worker and [plugins.NAME])"
            )
        if name in RESERVED:
            raise NewPluginError(f"invalid plugin name {name!r}: a built-in plugin has it")
        from roleserve_core.roles import check_custom_role_name

        role = name if role is None else role
        try:
            check_custom_role_name(role)
        except ValueError as exc:
            raise NewPluginError(f"--role: {exc}") from None
        return cls(name, role, core_version, api)

    @property
    def package(self) -> str:
        return f"roleserve_{self.name}"

    @property
    def distribution(self) -> str:
        return f"roleserve-{self.name.replace('_', '-')}"

    def core_range(self) -> str:
        """The core's current major range, ``>=X.Y,<X+1`` (``>=0.1,<1`` for 0.1.2)."""
        found = re.match(r"(\d+)\.(\d+)", self.core_version)
        major, minor = (int(found[1]), int(found[2])) if found else (0, 1)
        return f">={major}.{minor},<{major + 1}"

    def substitutions(self) -> dict[str, str]:
        """What ``$name``, ``$package``, ... stand for in the templates."""
        return {
            "name": self.name,
            "role": self.role,
            "package": self.package,
            "dist": self.distribution,
            "core_range": self.core_range(),
            "api": str(self.api),
        }

    def target(self, template: str) -> str:
        """Where a template's file goes, relative to the plugin's directory."""
        path = template.removesuffix(SUFFIX)
        if path == "gitignore":  # stored without its dot, as package data may drop dotfiles
            return ".gitignore"
        path = re.sub(r"^package/", f"{self.package}/", path)
        path = path.replace("/worker.py", f"/worker_{self.name}.py")
        return path.replace("tests/test_plugin.py", f"tests/test_{self.name}.py")


def render(plugin: NewPlugin) -> dict[str, str]:
    """Every file of the new plugin: its path in the plugin's directory → its text."""
    values = plugin.substitutions()
    return {
        plugin.target(path): string.Template(text).substitute(values)
        for path, text in _templates(resources.files("roleserve_core.cli") / TEMPLATES, "")
    }


def _templates(folder: Traversable, prefix: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for entry in sorted(folder.iterdir(), key=lambda entry: entry.name):
        if entry.is_dir():
            found += _templates(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(SUFFIX):
            found.append((prefix + entry.name, entry.read_text(encoding="utf-8")))
    return found


def write(directory: Path, files: dict[str, str]) -> None:
    """Create ``directory`` (it must not exist) holding ``files``.

    :raises NewPluginError: if ``directory`` exists, or cannot be created.
    """
    try:
        directory.mkdir(parents=True)
    except FileExistsError:
        raise NewPluginError(
            f"{directory} exists, and plugin new never writes into an existing directory; "
            "choose another with --dir, or remove it"
        ) from None
    except OSError as exc:
        raise NewPluginError(f"cannot create {directory}: {exc.strerror}") from None
    for relative, text in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def add_parser(commands: Any) -> None:
    """Register ``roleserve plugin new``."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "plugin",
        description="Start a plugin of your own: see `roleserve plugin new --help`.",
    )
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    new: argparse.ArgumentParser = subcommands.add_parser(
        "new",
        help="write the distribution of a new plugin, with tests that pass",
        description=(
            "Write a new plugin's distribution into a new directory: pyproject.toml (its "
            "entry point in the group 'roleserve.plugins', the core's current major range), "
            "the package roleserve_NAME (hooks.py, values.py, a worker gated on the custom "
            "role), tests that use roleserve-core's test kit, a README that says how to "
            "develop, test and run it, a CHANGELOG. Nothing is written if NAME or ROLE is "
            "refused, and an existing directory is never written into."
        ),
    )
    new.add_argument(
        "name",
        metavar="NAME",
        help="the plugin's name: lower case letters, digits and single underscores",
    )
    new.add_argument(
        "--role",
        help="the custom role its worker runs for (default: NAME)",
    )
    new.add_argument(
        "--dir",
        type=Path,
        help=(
            "the directory to create; must not exist (default: the distribution's name, "
            "roleserve-NAME with - for _)"
        ),
    )
    new.set_defaults(handler=run_new)


def run_new(args: argparse.Namespace) -> int:
    """Write the plugin; exit 2, writing nothing, if refused."""
    from roleserve_core.plugin_loader import PLUGIN_API_VERSION
    from roleserve_core.version import core_version

    try:
        plugin = NewPlugin.checked(args.name, args.role, core_version(), PLUGIN_API_VERSION)
        directory: Path = args.dir or Path(plugin.distribution)
        write(directory, render(plugin))
    except NewPluginError as exc:
        report("roleserve plugin new", exc)
        return 2
    print(f"wrote the plugin {plugin.name} ({plugin.distribution}) to {directory}")
    print(f"its worker runs on a node with the role custom:{plugin.role}; next steps:")
    print(f"  {directory}/README.md")
    return 0
