"""Fuzzed requests to every method of ``NodeManagement``, on a node runtime whose core worker
``nodemgmt`` serves it over mutual TLS (issue 11, item 5).

The methods come from the service descriptor, the requests from the request messages'
descriptors (``roleserve_core.testing.fuzz``), with DNs steered half of the time to real
runnables so that calls get past the first check. Each call is the owner's. After every
call: it ended OK or with a deliberate refusal, a refusal says why, nothing was logged as an
unexpected exception, and the server still answers. RestartRunnable is steered to no real
runnable: restarting one restarts the node's workers (or the server answering), which its
own tests cover. One node serves the whole module; a followed GetLogs stream is read for a
moment (``fuzz.STREAM_WAIT``) and cancelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from roleserve_core.limits import MAX_READ_BYTES, MAX_REQUEST_BYTES
from roleserve_core.ports import NODE_MANAGEMENT_PORT, endpoint
from roleserve_core.proto import nodemanagement_pb2
from roleserve_core.rpc import secure_channel
from roleserve_core.testing import (
    FakeClock,
    NodeHarness,
    PluginHarness,
    SupervisorRunner,
    ThrowawayCA,
    random_loopback,
)
from roleserve_core.testing.fuzz import (
    ACCEPTABLE,
    CALL_TIMEOUT,
    OVERLY_LARGE_REPR,
    ErrorRecords,
    Overrides,
    call,
    methods,
    raw_requests,
    register_profiles,
    requests,
    texts,
)
from roleserve_core.values import NETWORK, NODE_CREDENTIALS, NetworkStatus

pytestmark = pytest.mark.filterwarnings(OVERLY_LARGE_REPR)

register_profiles()

SERVICE = nodemanagement_pb2.DESCRIPTOR.services_by_name["NodeManagement"]
METHODS = list(methods(SERVICE))
IDS = [method.name for method in METHODS]
NODEMGMT = "root.role.nodemgmt"


@dataclass(repr=False)
class Fuzzed:
    """The node under fuzz and the owner's channel to it."""

    node: NodeHarness
    owner: Any
    """The owner's channel (untyped: calls send and receive raw bytes)."""
    errors: ErrorRecords
    overrides: Overrides
    portal: BlockingPortal | None = None

    def call(self, method: MethodDescriptor, payload: bytes) -> grpc.StatusCode:
        """``check``, from a test's thread."""
        assert self.portal is not None
        return self.portal.call(self.check, method, payload)

    async def check(self, method: MethodDescriptor, payload: bytes) -> grpc.StatusCode:
        """Send ``payload``; check the answer, the log and the server (module doc)."""
        service: ServiceDescriptor = method.containing_service
        code, details = await call(self.owner, service, method, payload)
        assert code in ACCEPTABLE, f"{method.name} answered {code.name}: {details[:2000]}"
        assert code is grpc.StatusCode.OK or details, f"{method.name}: {code.name} says nothing"
        assert self.errors.take() == []
        with anyio.fail_after(CALL_TIMEOUT):
            path = "/roleserve.nodemanagement.NodeManagement/GetSupervisionTree"
            await self.owner.unary_unary(path)(b"")
        return code


@contextlib.asynccontextmanager
async def _fuzzed(directory: Path) -> AsyncIterator[Fuzzed]:
    ca = ThrowawayCA()
    async with contextlib.AsyncExitStack() as stack:
        runner = await stack.enter_async_context(SupervisorRunner(FakeClock()))
        node = await NodeHarness.start(runner, PluginHarness(core_workers=True).runtime(directory))
        credentials = ca.node()
        address = random_loopback()
        node.set(NODE_CREDENTIALS, credentials)
        node.set(NETWORK, NetworkStatus(address))
        await node.wait_state(NODEMGMT)
        target = endpoint(address, NODE_MANAGEMENT_PORT)
        owner = await stack.enter_async_context(
            secure_channel(target, ca.user(), node_id=credentials.node_id)
        )
        errors = stack.enter_context(ErrorRecords())
        dns = sorted(status.dn for status in node.supervisor.status("root"))
        real = st.one_of(st.sampled_from(dns), texts())
        service = "roleserve.nodemanagement."
        overrides: Overrides = {
            service + "GetLogsRequest.dn": real,
            service + "GetSupervisionTreeRequest.dn": real,
            service + "GetValuesRequest.name": st.one_of(
                st.sampled_from(["node_credentials", "network", "nope"]), texts()
            ),
        }
        yield Fuzzed(node, owner, errors, overrides)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    """The module's node, in an event loop of its own thread; the tests are synchronous
    and call into it through a portal (see the controlplane plugin's test_fuzz_curator)."""
    directory: Path = tmp_path_factory.mktemp("fuzz-node")
    with (
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(_fuzzed(directory)) as fuzzed,
    ):
        fuzzed.portal = portal
        yield fuzzed


@pytest.mark.parametrize("method", METHODS, ids=IDS)
@given(data=st.data())
def test_a_fuzzed_request_is_answered_or_refused_cleanly(
    fuzzed: Fuzzed, method: MethodDescriptor, data: st.DataObject
) -> None:
    request = data.draw(requests(method.input_type, fuzzed.overrides), label="request")
    payload = request.SerializeToString()
    code = fuzzed.call(method, payload)
    if len(payload) > MAX_READ_BYTES:
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    elif len(payload) > MAX_REQUEST_BYTES:
        assert code is grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("method", METHODS, ids=IDS)
@given(data=st.data())
def test_bytes_that_are_no_request_are_refused(
    fuzzed: Fuzzed, method: MethodDescriptor, data: st.DataObject
) -> None:
    payload = data.draw(raw_requests(method.input_type, fuzzed.overrides), label="payload")
    code = fuzzed.call(method, payload)
    try:
        message_factory.GetMessageClass(method.input_type).FromString(payload)
    except DecodeError:
        beyond = len(payload) > MAX_READ_BYTES  # not even read
        expected = (
            grpc.StatusCode.RESOURCE_EXHAUSTED if beyond else grpc.StatusCode.INVALID_ARGUMENT
        )
        assert code is expected
