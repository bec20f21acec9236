"""Sub-commands whose parsers are built when chosen: ``roleserve --version`` and every
``--help`` answer without importing the modules of the commands they do not run.

::

    roleserve [ctl] --help            the listing: each command's name and one-line help,
                                      from a table (LazyCommand); no command module imported
    roleserve ctl nodes ...           argparse picks "nodes": only then is its module
                                      imported, and its add_parsers registers the real
                                      parser in the placeholder's place; parsing goes on
    roleserve ctl --help, or a name   ``more`` runs first (ctl: the plugins' commands, read
    the table does not know           from entry points): they join the listing, and the
                                      "invalid choice" error names them

Why a table, not the modules' own ``help=``: the listing must not import the modules it
lists, so each command's one-line help lives in the table, once (a module's registration
of a listed name passes none; one it passes anyway is dropped, the table's stays). A
module may register several listed commands (``_nodes``: nodes, approve, decommission):
loading it for one fills in the placeholders of all.

A plain class, not a dataclass nor a NamedTuple: ``dataclasses`` imports ``inspect``,
``typing`` costs a tenth of the interpreter's start. Deliberately left out: aliases (no
command has one), and loading everything for shell completion (there is none).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterable

# typing only for the annotations: the ``roleserve`` command imports this module at start,
# and importing ``typing`` costs it a tenth of the interpreter's start (benchmarks/cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LazyCommand", "LazyCommands", "add_lazy_subparsers"]


class LazyCommand:
    """A sub-command listed before its module is imported."""

    __slots__ = ("help", "name", "register")

    def __init__(self, name: str, help: str, register: str) -> None:
        self.name = name
        self.help = help
        """The one line the listing shows."""
        self.register = register
        """``module:function``; the function registers the command as
        ``function(commands)``, with ``commands.add_parser(name, ...)``."""


class _Choices(dict[str, "argparse.ArgumentParser | None"]):
    """The name-to-parser map argparse checks a chosen name against (None: a command not
    built yet): a name it does not hold completes the action (``more``) before the answer,
    so a plugin's command is found and the "invalid choice" error lists every command."""

    def __init__(self, action: LazyCommands) -> None:
        super().__init__()
        self._action = action

    def __contains__(self, name: object) -> bool:
        if not super().__contains__(name):
            self._action.complete()
        return super().__contains__(name)


class LazyCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """argparse's sub-parsers action with placeholders, filled in when chosen (see the
    module docstring). Made by ``add_lazy_subparsers``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # argparse reads a parser from it only in __call__, once the chosen one is built.
        self._name_parser_map = self.choices = _Choices(self)
        self._pending: dict[str, str] = {}
        self._more: Callable[[Any], None] | None = None

    def add_lazy(self, commands: Iterable[LazyCommand]) -> None:
        """List ``commands``, each built when chosen."""
        for command in commands:
            # What argparse's add_parser records for the listing, without a parser: the
            # placeholder is the name alone (an ArgumentParser each would cost the listing
            # more than its imports).
            self._choices_actions.append(self._ChoicesPseudoAction(command.name, (), command.help))
            self._name_parser_map[command.name] = None
            self._pending[command.name] = command.register

    def more(self, register: Callable[[Any], None]) -> None:
        """Have ``register(self)`` add further commands when every command is needed: for
        the listing, and for a name nothing registered yet."""
        self._more = register

    def complete(self) -> None:
        """Run ``more`` (once)."""
        register, self._more = self._more, None
        if register is not None:
            register(self)

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        """argparse's, except that a listed command's real parser takes its placeholder's
        place (in the listing's order, under the table's help)."""
        if name not in self._pending:
            return super().add_parser(name, **kwargs)
        del self._pending[name]
        kwargs.pop("help", None)
        if kwargs.get("prog") is None:
            kwargs["prog"] = f"{self._prog_prefix} {name}"
        parser = self._parser_class(**kwargs)
        self._name_parser_map[name] = parser  # the placeholder's key: its place stays
        return parser

    def _get_subactions(self) -> list[argparse.Action]:
        self.complete()
        return super()._get_subactions()

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        name = values[0]
        if name in self._pending:
            register = self._pending[name]
            module, function = register.split(":")
            getattr(importlib.import_module(module), function)(self)
            if self._name_parser_map[name] is None:
                raise RuntimeError(f"{register} registers no command {name!r}")
        super().__call__(parser, namespace, values, option_string)


def add_lazy_subparsers(
    parser: argparse.ArgumentParser,
    commands: Iterable[LazyCommand],
    *,
    more: Callable[[Any], None] | None = None,
    **kwargs: Any,
) -> LazyCommands:
    """``parser.add_subparsers(**kwargs)`` listing ``commands``, each built when chosen,
    and the ones ``more`` registers when every command is needed."""
    action = parser.add_subparsers(action=LazyCommands, **kwargs)
    assert isinstance(action, LazyCommands)
    action.add_lazy(commands)
    if more is not None:
        action.more(more)
    return action
