# The metrics plugin's declared API: what other plugins may import from it.
#
# For type checkers and for lazy_loader (see __init__.py), which imports each name from its
# module on first use. tests/test_exports.py keeps the other plugins to these names.

# An exporter the plugin serves (exporters.py).
from .exporters import Exporter as Exporter

# Its ports (ports.py).
from .ports import METRICS_PORT as METRICS_PORT
from .ports import NODE_EXPORTER_PORT as NODE_EXPORTER_PORT

__all__: list[str]
