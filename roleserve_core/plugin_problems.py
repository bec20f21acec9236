"""What is wrong with a plugin, said so that its author can fix it.

The loader (``plugin_loader.py``) decides what to do about a problem; this module words it: one
line that says what is wrong and what to do, naming the file where it can. Each message
ends in the fix, because the reader is usually the plugin's author, looking at a failed
test or at ``roleserve plugins``, not an operator who can only install another version.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pluggy

from roleserve_core.hookspecs import PROJECT

__all__ = [
    "ACCEPTED_PLUGIN_APIS",
    "API_ATTRIBUTE",
    "PLUGIN_API_VERSION",
    "api_problem",
    "signature_problem",
    "source_file",
    "unknown_hook_message",
]

PLUGIN_API_VERSION = 1
"""The newest plugin API this roleserve-core provides, which ``roleserve plugin new``
writes; a plugin module declares the one it was written for as ``ROLESERVE_PLUGIN_API =
1``. Bumped only on an incompatible change: a hook changed, or a name removed."""

ACCEPTED_PLUGIN_APIS: tuple[int, ...] = (PLUGIN_API_VERSION,)
"""Every plugin API this core loads plugins for; a plugin declaring another is refused.
While an API is here, every name and module path it documented still imports (moved ones
with a DeprecationWarning, ``roleserve_core._moved``): the plugin API promise of
docs/plugin-guide.md. An old API leaves only with the names it kept."""

API_ATTRIBUTE = "ROLESERVE_PLUGIN_API"
MARKER_ATTRIBUTE = f"{PROJECT}_impl"
"""Where pluggy's ``@hookimpl`` leaves its options on a function."""


def source_file(plugin: object) -> str | None:
    """The file that defines ``plugin`` (a module, a class, or an instance of one), relative
    to the working directory when under it; None if it has none (built in a REPL)."""
    source: Any = plugin
    if not inspect.ismodule(plugin) and not inspect.isclass(plugin):
        # An object: where its hook implementations are (a SimpleNamespace's type is not).
        marked = (getattr(plugin, name, None) for name in dir(plugin))
        source = next((f for f in marked if hasattr(f, MARKER_ATTRIBUTE)), type(plugin))
    try:
        found = inspect.getsourcefile(source)
    except TypeError:
        return None
    if found is None:
        return None
    path = Path(found)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def api_problem(plugin: object, file: str | None) -> str | None:
    """What is wrong with the plugin API ``plugin`` declares, and the fix; None if right."""
    declared = getattr(plugin, API_ATTRIBUTE, None)
    if type(declared) is int and declared in ACCEPTED_PLUGIN_APIS:
        return None
    if declared is None:
        return (
            f"does not declare the plugin API it was written for; add the line "
            f"`{API_ATTRIBUTE} = {PLUGIN_API_VERSION}` to {file or 'its hook module'}"
        )
    return (
        f"was written for plugin API {declared!r}; this roleserve-core accepts plugin "
        f"{_apis(ACCEPTED_PLUGIN_APIS)}. Install a version of the plugin made for it."
    )


def _apis(accepted: tuple[int, ...]) -> str:
    """``API 1``, ``APIs 1 and 2``, ``APIs 1, 2 and 3``."""
    if len(accepted) == 1:
        return f"API {accepted[0]}"
    *first, last = map(str, accepted)
    return f"APIs {', '.join(first)} and {last}"


def unknown_hook_message(hook: str, specified: list[str]) -> str:
    """The warning for an implementation of ``hook``, which nobody specified."""
    # 0.85: a slip of one or two letters (on_role, roleserve_wrokers), not every hook that
    # shares the roleserve_ prefix (roleserve_greeting is not roleserve_settings misspelled).
    close = difflib.get_close_matches(hook, specified, n=1, cutoff=0.85)
    guess = f"did you mean {close[0]!r}?" if close else "misspelled?"
    return (
        f"implements {hook!r}, which no loaded plugin defines; {guess} "
        "(mark it @hookimpl(optionalhook=True) if it belongs to an optional plugin)"
    )


def signature_problem(manager: pluggy.PluginManager, plugin: object) -> str | None:
    """The first hook implementation of ``plugin`` that asks for an argument its hook does
    not pass, said with the signature to use; None if there is none (pluggy refused it for
    another reason)."""
    for attribute in dir(plugin):
        options = manager.parse_hookimpl_opts(plugin, attribute)
        if options is None:
            continue
        hook = options.get("specname") or attribute
        caller = getattr(manager.hook, hook, None)
        if caller is None or caller.spec is None:
            continue
        asked = _required_arguments(getattr(plugin, attribute))
        extra = [name for name in asked if name not in caller.spec.argnames]
        if extra:
            passed = ", ".join(caller.spec.argnames)
            return (
                f"{attribute}({', '.join(asked)}) asks for {', '.join(map(repr, extra))}, "
                f"which the hook does not pass; define it as {hook}({passed}), "
                "leaving out the arguments it does not use"
            )
    return None


def _required_arguments(function: Callable[..., Any]) -> list[str]:
    """The arguments a hook implementation must be called with (pluggy's ``argnames``)."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [
        parameter.name
        for parameter in inspect.signature(function).parameters.values()
        if parameter.kind in positional and parameter.default is inspect.Parameter.empty
    ]
