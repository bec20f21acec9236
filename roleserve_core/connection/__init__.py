"""The node's connection to the leading curator (``curator_connection``), finding the
leader for anyone else who needs it (``roleserve ctl``), and ``on_each_connection``: how a
worker of any plugin runs its calls to the curator across changes of leader.

The exports load on first use (``lazy_loader``; listed in ``__init__.pyi``): ``roleserve
ctl`` needs ``find_leader`` without the node's worker machinery behind ``Session``.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
