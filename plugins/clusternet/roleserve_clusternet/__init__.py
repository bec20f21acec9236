"""roleserve-clusternet: WireGuard cluster mesh.

Its declared API, for other plugins to build on, is this package's top level (``__all__``;
the names and their modules are listed once, in ``__init__.pyi``, which type checkers read
too): another plugin imports only these names (and, in their tests, the test kit
``roleserve_clusternet.testing``). Each is imported on first use (PEP 562, through
``lazy_loader``, as ``roleserve_core`` does), so that importing the package, which the hooks
module and its entry points do, costs nothing.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
