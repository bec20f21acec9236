# The controlplane plugin's declared API: what other plugins may import from it.
#
# For type checkers and for lazy_loader (see __init__.py), which imports each name from its
# module on first use. tests/test_exports.py keeps the other plugins to these names.

# The plugin object itself, for tests that register it by hand.
from . import hooks as hooks

# etcd's ports (ports.py; the curator's is the core's CURATOR_PORT).
from .ports import ETCD_CLIENT_PORT as ETCD_CLIENT_PORT
from .ports import ETCD_METRICS_PORT as ETCD_METRICS_PORT
from .ports import ETCD_PEER_PORT as ETCD_PEER_PORT

# etcd, for plugins keeping state next to the curator's (LOCAL_CONTROL_PLANE's credentials).
from .consensus import EtcdBinary as EtcdBinary
from .consensus import EtcdClient as EtcdClient
from .consensus import compare_create_revision as compare_create_revision
from .consensus import put_operation as put_operation
from .consensus.certificates import write_tls_files as write_tls_files

# The curator's extensions: services a plugin adds to the leading curator.
from .curator.credentials import csr_key as csr_key
from .curator.errors import handled as handled
from .curator.extension import CuratorExtension as CuratorExtension
from .curator.extension import CuratorLeader as CuratorLeader
from .curator.service_not_leading import NotLeadingHandler as NotLeadingHandler

__all__: list[str]
