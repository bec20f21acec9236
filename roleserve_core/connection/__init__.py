"""The node's connection to the leading curator (``curator_connection``), finding the
leader for anyone else who needs it (``roleserve ctl``), and ``on_each_connection``: how a
worker of any plugin runs its calls to the curator across changes of leader."""

from roleserve_core.connection.leader import (
    LeaderInfo,
    LeaderRefusedError,
    NoLeaderError,
    find_leader,
    follow_leader,
)
from roleserve_core.connection.session import LEADER_CHANGE_WINDOW, Session, on_each_connection

__all__ = [
    "LEADER_CHANGE_WINDOW",
    "LeaderInfo",
    "LeaderRefusedError",
    "NoLeaderError",
    "Session",
    "find_leader",
    "follow_leader",
    "on_each_connection",
]
