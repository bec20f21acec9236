"""A test plugin whose import fails: it needs a distribution that is not installed."""

import importlib

importlib.import_module("roleserve_test_missing_dependency")

ROLESERVE_PLUGIN_API = 1
