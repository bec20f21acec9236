# The clusternet plugin's declared API: what other plugins may import from it.
#
# For type checkers and for lazy_loader (see __init__.py), which imports each name from its
# module on first use. tests/test_exports.py keeps the other plugins to these names.

# Its port (ports.py).
from .ports import CLUSTERNET_PORT as CLUSTERNET_PORT

__all__: list[str]
