# The package's exports, for type checkers and for lazy_loader (see __init__.py).
from .leader import ForeignClusterError as ForeignClusterError
from .leader import LeaderInfo as LeaderInfo
from .leader import LeaderRefusedError as LeaderRefusedError
from .leader import NoLeaderError as NoLeaderError
from .leader import NoQuorumError as NoQuorumError
from .leader import find_leader as find_leader
from .leader import follow_leader as follow_leader
from .session import LEADER_CHANGE_WINDOW as LEADER_CHANGE_WINDOW
from .session import LeaderUnresponsiveError as LeaderUnresponsiveError
from .session import Session as Session
from .session import on_each_connection as on_each_connection

__all__: list[str]
