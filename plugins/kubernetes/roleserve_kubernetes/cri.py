"""A small async client of the Container Runtime Interface over containerd's unix socket.

::

    CriClient(socket) ── grpc.aio, unix:<socket> ──▶ runtime.v1.RuntimeService / ImageService
        every call awaited through roleserve_core.rpc.unary (anyio cancellation stays
        anyio's) with a deadline; errors are grpc.aio.AioRpcError, as grpc raises them

Only what the plugin (and its tests and benchmark) calls: version and status, pod sandboxes,
containers, image status; the messages are ``proto/cri.proto``'s, the subset of upstream's
``runtime.v1`` it defines. ``wait_runtime_ready`` is the readiness check of containerd.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

import anyio
import grpc
import grpc.aio

from roleserve_core.rpc import unary
from roleserve_kubernetes.errors import RuntimeNotReadyError
from roleserve_kubernetes.proto import cri_pb2, cri_pb2_grpc

__all__ = ["CALL_TIMEOUT", "READY_POLL", "RUNTIME_READY", "CriClient", "runtime_ready"]

CALL_TIMEOUT = 30.0
"""Seconds a call may take by default (a sandbox's start runs CNI, which may be slow)."""

READY_POLL = 0.02
"""Seconds between Status calls while containerd starts (its socket is up in ~0.1 s)."""

RUNTIME_READY = "RuntimeReady"
NETWORK_READY = "NetworkReady"


def runtime_ready(status: cri_pb2.StatusResponse, condition: str = RUNTIME_READY) -> bool:
    """Whether ``status`` holds ``condition`` true (``RuntimeReady``, ``NetworkReady``)."""
    return any(c.type == condition and c.status for c in status.status.conditions)


class CriClient:
    """CRI calls to the containerd listening on ``socket``; use as ``async with``."""

    def __init__(self, socket: Path, timeout: float = CALL_TIMEOUT) -> None:
        self.socket = socket
        self.timeout = timeout
        self._channel = grpc.aio.insecure_channel(f"unix:{socket}")
        self.runtime = cri_pb2_grpc.RuntimeServiceStub(self._channel)
        self.images = cri_pb2_grpc.ImageServiceStub(self._channel)

    async def __aenter__(self) -> CriClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self._channel.close()

    async def version(self) -> cri_pb2.VersionResponse:
        return await unary(
            self.runtime.Version(cri_pb2.VersionRequest(version="v1"), timeout=self.timeout)
        )

    async def status(self, deadline: float | None = None) -> cri_pb2.StatusResponse:
        """The runtime's conditions; ``deadline``: seconds, else the client's default."""
        return await unary(
            self.runtime.Status(cri_pb2.StatusRequest(), timeout=deadline or self.timeout)
        )

    async def wait_runtime_ready(self, limit: float = 60.0) -> cri_pb2.StatusResponse:
        """Poll ``Status`` until the runtime says it is ready.

        Unreachable (the socket not there yet) counts as not ready.

        :raises RuntimeNotReadyError: not ready within ``limit`` seconds, with the last
            answer or error.
        """
        last = "no answer"
        with anyio.move_on_after(limit):
            while True:
                try:
                    status = await self.status(deadline=max(READY_POLL * 50, 1.0))
                except grpc.aio.AioRpcError as exc:
                    last = f"{exc.code().name}: {exc.details()}"
                else:
                    if runtime_ready(status):
                        return status
                    last = str(status.status).replace("\n", " ")
                await anyio.sleep(READY_POLL)
        raise RuntimeNotReadyError(
            f"containerd at {self.socket} did not report {RUNTIME_READY} within "
            f"{limit}s; last: {last}"
        )

    async def run_pod_sandbox(self, config: cri_pb2.PodSandboxConfig) -> str:
        """Start a sandbox; its ID."""
        request = cri_pb2.RunPodSandboxRequest(config=config)
        reply = await unary(self.runtime.RunPodSandbox(request, timeout=self.timeout))
        return reply.pod_sandbox_id

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        request = cri_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox_id)
        await unary(self.runtime.StopPodSandbox(request, timeout=self.timeout))

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        request = cri_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id)
        await unary(self.runtime.RemovePodSandbox(request, timeout=self.timeout))

    async def pod_sandbox_status(self, sandbox_id: str) -> cri_pb2.PodSandboxStatus:
        request = cri_pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id)
        reply = await unary(self.runtime.PodSandboxStatus(request, timeout=self.timeout))
        return reply.status

    async def list_pod_sandboxes(self) -> list[cri_pb2.PodSandbox]:
        request = cri_pb2.ListPodSandboxRequest()
        reply = await unary(self.runtime.ListPodSandbox(request, timeout=self.timeout))
        return list(reply.items)

    async def create_container(
        self,
        sandbox_id: str,
        config: cri_pb2.ContainerConfig,
        sandbox_config: cri_pb2.PodSandboxConfig,
    ) -> str:
        """Create (not start) a container in a sandbox; its ID."""
        request = cri_pb2.CreateContainerRequest(
            pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config
        )
        reply = await unary(self.runtime.CreateContainer(request, timeout=self.timeout))
        return reply.container_id

    async def start_container(self, container_id: str) -> None:
        request = cri_pb2.StartContainerRequest(container_id=container_id)
        await unary(self.runtime.StartContainer(request, timeout=self.timeout))

    async def stop_container(self, container_id: str, grace: int = 0) -> None:
        request = cri_pb2.StopContainerRequest(container_id=container_id, timeout=grace)
        await unary(self.runtime.StopContainer(request, timeout=self.timeout + grace))

    async def remove_container(self, container_id: str) -> None:
        request = cri_pb2.RemoveContainerRequest(container_id=container_id)
        await unary(self.runtime.RemoveContainer(request, timeout=self.timeout))

    async def container_status(self, container_id: str) -> cri_pb2.ContainerStatus:
        request = cri_pb2.ContainerStatusRequest(container_id=container_id)
        reply = await unary(self.runtime.ContainerStatus(request, timeout=self.timeout))
        return reply.status

    async def list_containers(self) -> list[cri_pb2.Container]:
        request = cri_pb2.ListContainersRequest()
        reply = await unary(self.runtime.ListContainers(request, timeout=self.timeout))
        return list(reply.containers)

    async def image_status(self, reference: str) -> cri_pb2.Image | None:
        """The image ``reference`` names, or None if containerd's CRI does not have it."""
        request = cri_pb2.ImageStatusRequest(image=cri_pb2.ImageSpec(image=reference))
        reply = await unary(self.images.ImageStatus(request, timeout=self.timeout))
        return reply.image if reply.HasField("image") else None

    async def remove_all_pods(self) -> int:
        """Stop and remove every pod sandbox (and so its containers and network); the
        number removed. What the worker does before it stops containerd, so no shim, no
        container and no pod network namespace outlives the role."""
        sandboxes = await self.list_pod_sandboxes()
        for sandbox in sandboxes:
            await self.stop_pod_sandbox(sandbox.id)
            await self.remove_pod_sandbox(sandbox.id)
        return len(sandboxes)
