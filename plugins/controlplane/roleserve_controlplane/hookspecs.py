"""The hook the controlplane plugin defines for other plugins: ``roleserve_curator_services``.

The plugin adds it to the node's plugin manager (``roleserve_add_hookspecs``); another
plugin implements it with the core's marker, importing only the extension's types::

    from roleserve_controlplane.curator.extension import CuratorExtension
    from roleserve_core import hookimpl

    @hookimpl(optionalhook=True)   # quiet when the controlplane plugin is not installed
    def roleserve_curator_services(node):
        def add(server, leader):
            my_pb2_grpc.add_MyServicer_to_server(MyService(leader.etcd), server)
        return [CuratorExtension([my_pb2.DESCRIPTOR.services_by_name["My"]], add)]
"""

from __future__ import annotations

from typing import Any

from roleserve_core import NodeContext, hookspec

__all__ = ["roleserve_curator_services"]


@hookspec
def roleserve_curator_services(node: NodeContext) -> list[Any]:
    """Add gRPC services to the leading curator's server, next to ``Curator`` and
    ``Management``: APIs of a plugin that need the cluster's etcd and the curator's
    authorization (the Kubernetes plugin issues kubelet certificates this way).

    Called by the controlplane worker each time it starts the curator (when this node's
    consensus role starts); each returned extension's ``add`` is then called each time
    the curator wins an election, with the new term's ``CuratorLeader`` (its etcd client,
    the node records), and its services stop with the term.

    :param node: this plugin's ``NodeContext``.
    :returns: ``roleserve_controlplane.curator.extension.CuratorExtension`` objects, each
        naming its service descriptors and an ``add(server, leader)`` that registers them.
        Return ``[]`` for none.

    Every method must declare its ``roleserve.authz.authorization`` option in its proto,
    as the core's do: the server refuses a method without it. Requests go through the
    same interceptor, node gate (decommissioned nodes) and revoked users as the curator's
    own. A follower answers the services' methods UNAVAILABLE, naming itself.

    Synchronous only; no I/O (``add`` too). If the hook raises or returns something
    else, the plugin's services are left out with one log line and the call counts as
    the plugin's hook failure; the curator runs without them.
    """
    raise NotImplementedError  # pragma: no cover - specification only
