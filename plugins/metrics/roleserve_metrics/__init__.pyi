# The metrics plugin's declared API: what other plugins may import from it.
#
# For type checkers and for lazy_loader (see __init__.py), which imports each name from its
# module on first use. tests/test_exports.py keeps the other plugins to these names.

# An exporter the plugin serves (exporters.py).
from .exporters import Exporter as Exporter

# Its discovery's role labels (discovery.py), and the scrape configuration `roleserve ctl
# prometheus-config` writes (ctl.py), for tests that run Prometheus against the plugin.
from .discovery import ROLE_LABEL as ROLE_LABEL
from .ctl import prometheus_yaml as prometheus_yaml

# Its ports (ports.py).
from .ports import METRICS_PORT as METRICS_PORT
from .ports import NODE_EXPORTER_PORT as NODE_EXPORTER_PORT

__all__: list[str]
