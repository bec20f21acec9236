"""The node's own workers, one module each, each run by a built-in plugin of its name
(``roleserve_core.builtin``, listed in ``plugin_loader.BUILTIN_PLUGINS``).

::

    worker      DN                      reads                         does
    rolefetch   root.role.rolefetch     curator_connection,           follows this node's
                                        cluster_nodes                 record; sets and persists
                                                                      roles
    statuspush  root.role.statuspush    curator_connection, network,  reports address, version,
                                        local_control_plane,          running curator, handled
                                        handled_custom_roles,         custom roles; again when
                                        cluster_nodes                 its record differs
    heartbeat   root.role.heartbeat     curator_connection            beats at the curator's
                                                                      interval
    nodemgmt    root.role.nodemgmt      node_credentials, network,    serves NodeManagement,
                                        revoked_credentials           refusing revoked users
    nodewatch   root.role.nodewatch     curator_connection            keeps cluster_nodes from
                                                                      one Watch of every node,
                                                                      while anyone reads it:
                                                                      the node's only Watch
    renewal     root.role.renewal       node_credentials,             renews the node
                                        curator_connection            certificate after 2/3 of
                                                                      its lifetime; saves and
                                                                      sets node_credentials
    revocations root.role.revocations   curator_connection            keeps revoked_credentials
                                                                      (for nodemgmt) from the
                                                                      leader's stream of them

rolefetch and statuspush take the node's own record from ``cluster_nodes``
(``_own_record``) rather than from a Watch of their own: one stream per node on the leader.
heartbeat and statuspush send the process's instance ID (``_identity``): the curator keeps
one process per node identity, and the refused one says so and retries.
"""

__all__: list[str] = []
