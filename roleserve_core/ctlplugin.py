"""Plugin API 1's path of ``roleserve_core.ctl_extension`` (what a plugin's ``roleserve ctl``
sub-command is written with), renamed so that its name says what it is: an extension of
``ctl``, not a part of the plugin loader (``plugin_loader``, ``plugin_problems``).

Kept for plugins that import from here: every name still does, with a ``DeprecationWarning``
naming ``roleserve_core.ctl_extension`` (the names a plugin needs are also at
``roleserve_core``'s top level). It goes when the core stops accepting plugin API 1
(docs/plugin-guide.md, "The plugin API promise").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roleserve_core._moved import moved_module

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ answers, and warns
    from roleserve_core.ctl_extension import EXIT_REFUSED as EXIT_REFUSED
    from roleserve_core.ctl_extension import EXIT_USAGE as EXIT_USAGE
    from roleserve_core.ctl_extension import ClusterAccess as ClusterAccess
    from roleserve_core.ctl_extension import CtlError as CtlError
    from roleserve_core.ctl_extension import CtlSession as CtlSession
    from roleserve_core.ctl_extension import add_ctl_command as add_ctl_command
    from roleserve_core.ctl_extension import open_ctl_session as open_ctl_session

__all__ = [
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "ClusterAccess",
    "CtlError",
    "CtlSession",
    "add_ctl_command",
    "open_ctl_session",
]

if not TYPE_CHECKING:
    __getattr__ = moved_module(__name__, "roleserve_core.ctl_extension", __all__, api=1)
