# The kubernetes plugin's declared API: what other plugins may import from it.
#
# For type checkers and for lazy_loader (see __init__.py), which imports each name from its
# module on first use. tests/test_exports.py keeps the other plugins to these names.

# The values it owns (values.py): other plugins read them, clusternet pod_network.
from .values import KUBERNETES_STATUS as KUBERNETES_STATUS
from .values import POD_NETWORK as POD_NETWORK
from .values import KubernetesStatus as KubernetesStatus
from .values import PodNetwork as PodNetwork

# Its port (ports.py).
from .ports import CONTAINERD_METRICS_PORT as CONTAINERD_METRICS_PORT

__all__: list[str]
