# The names this package re-exports, each imported from its module on first use
# (lazy_loader, see __init__.py); type checkers read this file instead.

from .authority import DEFAULT_NODE_CERTIFICATE_LIFETIME as DEFAULT_NODE_CERTIFICATE_LIFETIME
from .authority import ClusterAuthority as ClusterAuthority
from .authority import node_certificate_lifetime as node_certificate_lifetime
from .bootstrap import OWNER_IDENTITY as OWNER_IDENTITY
from .bootstrap import BootstrapMaterial as BootstrapMaterial
from .bootstrap import write_bootstrap as write_bootstrap
from .cache import NodeCache as NodeCache
from .cache import Subscription as Subscription
from .curator import Curator as Curator
from .curator import CuratorConfig as CuratorConfig
from .extension import CuratorExtension as CuratorExtension
from .extension import CuratorLeader as CuratorLeader
from .health import DEFAULT_HEARTBEAT_INTERVAL as DEFAULT_HEARTBEAT_INTERVAL
from .health import MISSED_BEATS as MISSED_BEATS
from .health import Heartbeats as Heartbeats
from .leader import CURATOR_PORT as CURATOR_PORT
from .leader import LeaderState as LeaderState
from .prefixes import ClusterNetwork as ClusterNetwork
from .prefixes import ClusterNetworkError as ClusterNetworkError
from .prefixes import PrefixesExhaustedError as PrefixesExhaustedError
from .state import ClusterState as ClusterState
from .state import NodeNotFoundError as NodeNotFoundError
