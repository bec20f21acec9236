# The plugin API: everything a plugin needs, importable from `roleserve_core` alone.
#
# For type checkers and for lazy_loader (see __init__.py), which imports each name from its
# module on first use. Add a name here to export it; tests/test_exports.py checks that every
# name resolves and that the repository's plugins and example import only from here (and
# from the namespaces and test kit below).

# Writing a plugin: hooks, workers and the node they run on.
from .hookspecs import hookimpl as hookimpl
from .hookspecs import hookspec as hookspec
from .node import NodeContext as NodeContext
from .node import NodeIntrospection as NodeIntrospection
from .node import Worker as Worker
from .node import custom_role as custom_role
from .plugin_loader import PLUGIN_API_VERSION as PLUGIN_API_VERSION
from .settings import Setting as Setting
from .settingsclass import PluginSettings as PluginSettings
from .settingsclass import port_setting as port_setting
from .settingsclass import setting as setting
from .settingsclass import former_setting_constants as former_setting_constants
from .version import core_version as core_version

# The plugin API promise: an old name warns (filter on this class) and a name that moved to
# a plugin not installed says which to install.
from ._moved import MovedToMissingError as MovedToMissingError
from ._moved import PluginAPIDeprecationWarning as PluginAPIDeprecationWarning

# The supervision tree a worker runs in.
from .clock import Clock as Clock
from .clock import MonotonicClock as MonotonicClock
from .supervisor import WAITING_FOR_OPERATOR as WAITING_FOR_OPERATOR
from .supervisor import BackoffPolicy as BackoffPolicy
from .supervisor import CrashLoopPolicy as CrashLoopPolicy
from .supervisor import Retry as Retry
from .supervisor import RunContext as RunContext
from .supervisor import Runnable as Runnable
from .supervisor import RunnableStatus as RunnableStatus
from .supervisor import State as State
from .supervisor import Supervisor as Supervisor
from .supervisor import LazyRunnable as LazyRunnable
from .supervisor import lazy_runnable as lazy_runnable
from .supervisor import retry as retry
from .logtree import LogEntry as LogEntry
from .logtree import LogFollower as LogFollower
from .logtree import LogTree as LogTree

# Values: the state plugins share (event cells, the registry, the core's keys and types).
from .event import Combined as Combined
from .event import Value as Value
from .event import ValueWatch as ValueWatch
from .event import Watcher as Watcher
from .registry import PluginValues as PluginValues
from .registry import ValueKey as ValueKey
from .registry import ValueRegistry as ValueRegistry
from .values import BOOTSTRAP as BOOTSTRAP
from .values import BOOTSTRAPPED as BOOTSTRAPPED
from .values import CLUSTER_NODES as CLUSTER_NODES
from .values import CURATOR_CONNECTION as CURATOR_CONNECTION
from .values import HANDLED_CUSTOM_ROLES as HANDLED_CUSTOM_ROLES
from .values import LOCAL_CONTROL_PLANE as LOCAL_CONTROL_PLANE
from .values import NETWORK as NETWORK
from .values import NODE_CREDENTIALS as NODE_CREDENTIALS
from .values import NODE_ID as NODE_ID
from .values import REVOKED_CREDENTIALS as REVOKED_CREDENTIALS
from .values import ROLES as ROLES
from .values import BootstrapRequest as BootstrapRequest
from .values import Bootstrapped as Bootstrapped
from .values import CuratorConnection as CuratorConnection
from .values import LocalControlPlane as LocalControlPlane
from .values import NetworkStatus as NetworkStatus
from .values import RevokedCredentials as RevokedCredentials

# Roles: what the control plane assigned to the node.
from .roles import CUSTOM_ROLE_NAME as CUSTOM_ROLE_NAME
from .roles import ConsensusMember as ConsensusMember
from .roles import ConsensusPeer as ConsensusPeer
from .roles import KubernetesController as KubernetesController
from .roles import KubernetesWorker as KubernetesWorker
from .roles import NodeRoles as NodeRoles
from .roles import roles_from_proto as roles_from_proto

# The cluster: its nodes, and calling the curator.
from .clusternodes import ClusterNodes as ClusterNodes
from .clusternodes import NodeChanges as NodeChanges
from .clusternodes import NodeWatchFold as NodeWatchFold
from .clusternodes import node_changes as node_changes
from .clusternodes import follow_changes as follow_changes
from .clusternodes import node_address as node_address
from .connection import on_each_connection as on_each_connection
from .proto import authorization_pb2 as authorization_pb2
from .proto import common_pb2 as common_pb2
from .proto import curator_pb2 as curator_pb2
from .proto import curator_pb2_grpc as curator_pb2_grpc
from .proto import management_pb2 as management_pb2
from .proto import management_pb2_grpc as management_pb2_grpc

# Programs a worker runs (etcd, exporters, containerd, ...), the files, sockets and ports
# it keeps.
from .files import DiskFullError as DiskFullError
from .files import naming_full_disk as naming_full_disk
from .files import write_atomically as write_atomically
from .rundir import mount_points as mount_points
from .rundir import mount_points_under as mount_points_under
from .rundir import node_runtime_dir as node_runtime_dir
from .rundir import runtime_root as runtime_root
from .ports import CURATOR_PORT as CURATOR_PORT
from .ports import NODE_MANAGEMENT_PORT as NODE_MANAGEMENT_PORT
from .ports import endpoint as endpoint
from .ports import local_exporter_host as local_exporter_host
from .process import Bind as Bind
from .process import address_in_use as address_in_use
from .process import ProcessRecord as ProcessRecord
from .process import ProcStat as ProcStat
from .process import ProgramExitedError as ProgramExitedError
from .process import ProgramNotFoundError as ProgramNotFoundError
from .process import ProgramSpec as ProgramSpec
from .process import RunningProgram as RunningProgram
from .process import LineParser as LineParser
from .process import parse_zap_json as parse_zap_json
from .process import program_runnable as program_runnable
from .process import read_record as read_record
from .process import read_stat as read_stat
from .process import read_stats as read_stats
from .process import resolve_binary as resolve_binary
from .process import start_program as start_program
from .process import stop_leftover as stop_leftover
from .workers.nodemgmt import Listen as Listen
from .workers.nodemgmt import plan_listen as plan_listen

# A plugin's own `roleserve ctl` sub-command (entry-point group roleserve.ctl).
from .ctl_extension import EXIT_REFUSED as EXIT_REFUSED
from .ctl_extension import EXIT_USAGE as EXIT_USAGE
from .ctl_extension import ClusterAccess as ClusterAccess
from .ctl_extension import CtlError as CtlError
from .ctl_extension import CtlSession as CtlSession
from .ctl_extension import add_ctl_command as add_ctl_command
from .ctl_extension import check_ctl_out as check_ctl_out
from .ctl_extension import issue_ctl_credentials as issue_ctl_credentials
from .ctl_extension import open_ctl_session as open_ctl_session
from .ctl_extension import roleserve_command as roleserve_command
from .ctl_extension import save_ctl_access as save_ctl_access

# What a plugin adds to `roleserve cluster up|status` (entry-point group roleserve.cluster).
from .cluster_extension import ClusterExtension as ClusterExtension
from .cluster_extension import ClusterMember as ClusterMember
from .cluster_extension import ClusterView as ClusterView
from .cluster_extension import RunnableSeen as RunnableSeen

# A local cluster of real node processes (`roleserve cluster up`'s), for plugins' tests.
from .localcluster import LocalCluster as LocalCluster
from .localcluster import LocalNode as LocalNode

# Errors a plugin raises or catches (the whole tree: roleserve_core.errors' docstring).
from .errors import CertificateVerificationError as CertificateVerificationError
from .errors import ConfigError as ConfigError
from .errors import CredentialsError as CredentialsError
from .errors import ExpectedError as ExpectedError
from .errors import FinalError as FinalError
from .errors import AddressInUseError as AddressInUseError
from .errors import IdentityError as IdentityError
from .errors import PluginLoadError as PluginLoadError
from .errors import RefusedError as RefusedError
from .errors import RequestLimitError as RequestLimitError
from .errors import ResourceError as ResourceError
from .errors import RoleserveError as RoleserveError
from .supervisor import RunnableImportError as RunnableImportError

# Namespaces for plugins that serve the cluster (the controlplane, metrics): the cluster's
# PKI, gRPC with mutual TLS, request limits, node statistics, the environment variables
# roleserve reads. Import them whole (`from roleserve_core import identity`) or from them
# (`from roleserve_core.identity import Credentials`).
from . import environment as environment
from . import identity as identity
from . import limits as limits
from . import rpc as rpc
from . import stats as stats

__version__: str
__all__: list[str]

# Plugin API 1's names of the plugins' ports, for type checkers (a plugin checked with mypy
# keeps passing); at run time each answers with its plugin's own, and warns (_moved.py).
# The kubernetes plugin's keys and types that moved the same way are not typed here (the
# core names no plugin's types): import them from roleserve_kubernetes.
ETCD_CLIENT_PORT: int
ETCD_PEER_PORT: int
ETCD_METRICS_PORT: int
CLUSTERNET_PORT: int
METRICS_PORT: int
NODE_EXPORTER_PORT: int
CONTAINERD_METRICS_PORT: int
