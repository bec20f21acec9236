"""Sub-commands of ``roleserve ctl`` that plugins contribute: entry-point group ``roleserve.ctl``.

::

    [project.entry-points."roleserve.ctl"]
    kubeconfig = "roleserve_kubernetes.ctl:add_parsers"

    roleserve ctl --help          lists ``kubeconfig`` (from the entry point's name; the
                                  plugin is not imported)
    roleserve ctl kubeconfig ...  loads the entry point, which registers its sub-command
                                  exactly as the core's modules do (``add_parsers(commands)``
                                  calling ``_command.add``), then parses and runs it

The entry point's value is a function ``add_parsers(commands)`` that registers one
sub-command named as the entry point, with ``roleserve_core.cli.ctl._command.add``: it
gets the connection options, the session (``Session.channel`` reaches the leader, where
the plugin's own services are) and the one-line errors of every other sub-command.

Why lazy: ``ctl --help`` and every other command must not import a plugin (nor the grpc,
protobuf and cryptography it pulls in); only the entry points' names are read, and only
for the listing or a name the core does not have (``ctl nodes`` reads none), by
``cli._installed`` rather than ``importlib.metadata``, whose import alone costs more than
the interpreter's start. A name the
core already uses is left out (the core's command wins); a plugin whose entry point fails
to load, or registers no sub-command of its name, fails its command with one line.
"""

from __future__ import annotations

import argparse

from roleserve_core.cli._installed import entry_points
from roleserve_core.cli.ctl._options import PROG, add_connection_options

# typing only for the annotations: ``ctl --help`` imports this module, and importing
# ``typing`` costs it a tenth of the interpreter's start (benchmarks/cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["GROUP", "add_parsers"]

GROUP = "roleserve.ctl"
"""The entry-point group of plugins' ``ctl`` sub-commands."""

_REST = "plugin_arguments"


def add_parsers(commands: Any) -> None:
    """Register a placeholder for each plugin sub-command; each loads its plugin when run."""
    taken = set(commands.choices)
    for entry in sorted(entry_points(GROUP), key=lambda entry: entry.name):
        if entry.name in taken:
            continue
        taken.add(entry.name)
        distribution = entry.distribution
        # prefix_chars without "-": every argument after the name is left to the plugin's
        # own parser, --help too.
        parser = commands.add_parser(
            entry.name,
            help=f"from {distribution}: `{PROG} {entry.name} --help` says more",
            add_help=False,
            prefix_chars="\0",
        )
        parser.add_argument(_REST, nargs=argparse.REMAINDER)
        parser.set_defaults(handler=_loading(entry.name, entry.value))


def _loading(name: str, value: str) -> Any:
    """The handler of the placeholder ``name``: load ``value``, parse, run."""

    def handler(args: argparse.Namespace) -> int:
        # Here, not at the top: the listing (``ctl --help``) needs none of the failures.
        from roleserve_core.cli._failure import report
        from roleserve_core.cli.ctl._errors import CtlError

        try:
            parser = _plugin_parser(name, value)
        except CtlError as exc:
            report(PROG, exc)
            return exc.exit_code
        given = {key: item for key, item in vars(args).items() if key not in (_REST, "handler")}
        parsed = parser.parse_args([name, *getattr(args, _REST)], argparse.Namespace(**given))
        code: int = parsed.handler(parsed)
        return code

    return handler


def _plugin_parser(name: str, value: str) -> argparse.ArgumentParser:
    """``roleserve ctl`` with only the plugin's sub-command ``name``.

    :raises CtlError: if the entry point does not load, or registers no ``name``.
    """
    from importlib.metadata import EntryPoint

    from roleserve_core.cli.ctl._errors import EXIT_USAGE, CtlError

    try:
        register = EntryPoint(name, value, GROUP).load()
        parser = argparse.ArgumentParser(prog=PROG)
        add_connection_options(parser, suppress=False)
        commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
        register(commands)
    except Exception as exc:
        raise CtlError(
            f"the plugin command {name!r} ({value}) failed to load: {exc}", EXIT_USAGE
        ) from None
    if name not in commands.choices:
        raise CtlError(f"the plugin command {name!r} ({value}) registers no {name!r}", EXIT_USAGE)
    return parser
