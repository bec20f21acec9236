# The package's exports, for type checkers and for lazy_loader (see __init__.py), which
# imports each one from its module on first use. Add a name here to export it.
from .errors import ExpectedError as ExpectedError
from .errors import FinalError as FinalError
from .errors import ResourceError as ResourceError
from .errors import RoleserveError as RoleserveError
from .event import Value as Value
from .event import ValueWatch as ValueWatch
from .event import Watcher as Watcher
from .hookspecs import hookimpl as hookimpl
from .hookspecs import hookspec as hookspec
from .node import NodeContext as NodeContext
from .node import Worker as Worker
from .node import custom_role as custom_role
from .plugins import PLUGIN_API_VERSION as PLUGIN_API_VERSION
from .roles import ConsensusMember as ConsensusMember
from .roles import ConsensusPeer as ConsensusPeer
from .roles import KubernetesController as KubernetesController
from .roles import KubernetesWorker as KubernetesWorker
from .roles import NodeRoles as NodeRoles
from .settings import Setting as Setting
from .supervisor import RunContext as RunContext
from .supervisor import State as State
from .supervisor import Supervisor as Supervisor
from .values import ValueKey as ValueKey

__version__: str
__all__: list[str]
