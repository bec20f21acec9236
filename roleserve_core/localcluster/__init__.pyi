# The package's exports, for type checkers and for lazy_loader (see __init__.py).
from .cluster import LocalCluster as LocalCluster
from .cluster import LocalClusterError as LocalClusterError
from .cluster import held_nodes as held_nodes
from .cluster import saved_first_address as saved_first_address
from .cluster import size_for_up as size_for_up
from .cluster import workers_for_up as workers_for_up
from .layout import DEFAULT_SIZE as DEFAULT_SIZE
from .layout import FIRST_ADDRESS as FIRST_ADDRESS
from .layout import default_roles as default_roles
from .process import LocalNode as LocalNode

__all__: list[str]
