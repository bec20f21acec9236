"""A local cluster: N node processes on loopback addresses (``roleserve cluster up``), or
each in a network namespace of its own (``cluster up --netns``, ``netns``).

The exports load on first use (``lazy_loader``; listed in ``__init__.pyi``), so that
``roleserve cluster --help`` can show the defaults of ``layout`` without loading the
machinery of ``cluster``.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
