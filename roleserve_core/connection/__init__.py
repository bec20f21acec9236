"""The node's connection to the leading curator (``curator_connection``), and finding the
leader for anyone else who needs it (``roleserve ctl``)."""

from roleserve_core.connection.leader import LeaderInfo, NoLeaderError, find_leader, follow_leader

__all__ = ["LeaderInfo", "NoLeaderError", "find_leader", "follow_leader"]
