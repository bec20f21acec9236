"""``CuratorLocal``: what every curator answers, leader or not.

A client that knows any curator asks it who leads (``GetCurrentLeader``) and keeps the
stream open to learn of every change; followers do not proxy, so clients go to the leader
themselves. The leader answers about itself once and holds the stream until it stops
leading, when its server stops and the stream breaks. A curator whose consensus has no
quorum names no leader and says which members answer (``no_quorum``), then ends the stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import grpc
from typing_extensions import override

from roleserve_controlplane.consensus import Election, Leader
from roleserve_controlplane.curator.errors import RefusedError, handled
from roleserve_controlplane.curator.quorum import QuorumProbe
from roleserve_controlplane.curator.state import ClusterState
from roleserve_controlplane.proto import state_pb2
from roleserve_core import curator_pb2, curator_pb2_grpc

__all__ = ["CuratorLocalService", "leader_value"]

Context = Any


def leader_value(leader: Leader) -> state_pb2.LeaderValue:
    """The campaign value of ``leader``: its node ID, host and port."""
    value = state_pb2.LeaderValue()
    value.ParseFromString(leader.value)
    return value


class CuratorLocalService(curator_pb2_grpc.CuratorLocalServicer):
    """``CuratorLocal`` of the curator of ``node_id``.

    :param leading: this curator's own campaign value while it leads, else None.
    :param quorum: a follower's look at its consensus (``quorum.probe_quorum``): without a
        quorum there is no leader to name, and the election's reads would only time out,
        so the follower says at once which members answer and ends the stream.
    """

    def __init__(
        self,
        node_id: str,
        state: ClusterState,
        election: Election,
        leading: state_pb2.LeaderValue | None,
        quorum: QuorumProbe | None = None,
    ) -> None:
        self.node_id = node_id
        self.state = state
        self.election = election
        self.leading = leading
        self.quorum = quorum

    @override
    @handled
    async def GetCACertificate(
        self, request: curator_pb2.GetCACertificateRequest, context: Context
    ) -> curator_pb2.GetCACertificateResponse:
        secrets = await self.state.secrets()
        if secrets is None:
            raise RefusedError(grpc.StatusCode.UNAVAILABLE, "the cluster is not bootstrapped yet")
        return curator_pb2.GetCACertificateResponse(ca_certificate=secrets.ca_certificate)

    @override
    @handled
    async def GetCurrentLeader(
        self, request: curator_pb2.GetCurrentLeaderRequest, context: Context
    ) -> AsyncIterator[curator_pb2.GetCurrentLeaderResponse]:
        if self.leading is not None:
            yield self._response(self.leading)
            await anyio.sleep_forever()
        report = await self.quorum() if self.quorum is not None else None
        if report is not None:
            yield curator_pb2.GetCurrentLeaderResponse(
                this_node_id=self.node_id, no_quorum=report.to_proto()
            )
            return
        observed = self.election.observe()
        async with contextlib.aclosing(observed):
            async for leader in observed:
                value = leader_value(leader) if leader is not None else None
                # Its own key means this curator just won, and this follower server is
                # about to make way for the leader's: clients ask again then, and get the
                # answer from the server that can serve them.
                if value is not None and value.node_id != self.node_id:
                    yield self._response(value)

    def _response(self, leader: state_pb2.LeaderValue) -> curator_pb2.GetCurrentLeaderResponse:
        return curator_pb2.GetCurrentLeaderResponse(
            leader_node_id=leader.node_id,
            leader_host=leader.host,
            leader_port=leader.port,
            this_node_id=self.node_id,
        )
