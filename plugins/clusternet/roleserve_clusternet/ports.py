"""clusternet's port (the core's are in ``roleserve_core.ports``)::

    7838  clusternet (WireGuard), on the node's own address      UDP

Declared in the plugin's API (``from roleserve_clusternet import CLUSTERNET_PORT``);
``[plugins.clusternet] listen_port`` changes it.
"""

from __future__ import annotations

__all__ = ["CLUSTERNET_PORT"]

CLUSTERNET_PORT = 7838
