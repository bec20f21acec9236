"""Fuzzing roleserve's gRPC services: requests drawn from the protobuf descriptors, sent to a
real server, and what every answer must be.

::

    service descriptors ──methods()──▶ every method, so a method added later is fuzzed too
    method.input_type ──requests()──▶ messages: odd and huge strings, bytes, integers at
                      │               their bounds, unknown enum values, thousands of
                      │               repeated entries, nested messages, maps
                      └─raw_requests()─▶ bytes that are no such message: random, mutated
                                       serialisations, a string field that is not UTF-8
                                       (which the protobuf library cannot build)
    call(channel, method, payload) ──▶ (status code, details): a server stream is read up
                                       to its first answer or for ``STREAM_WAIT`` seconds
    ACCEPTABLE ──▶ the codes a fuzzed call may end with: OK or a deliberate refusal
    ErrorRecords ──▶ the ERROR records with a traceback logged meanwhile (none allowed)

Profiles (``register_profiles``): ``ci``, the default, a few dozen examples per test so the
suites stay fast; ``long`` (``ROLESERVE_FUZZ=long``) for local runs, a thousand.

Not re-exported by ``roleserve_core.testing``: it needs hypothesis, a test dependency, and
the pytest plugin imports ``roleserve_core.testing`` in every suite.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import anyio
import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import (
    Descriptor,
    FieldDescriptor,
    MethodDescriptor,
    ServiceDescriptor,
)
from google.protobuf.message import Message
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from roleserve_core.limits import MAX_REQUEST_BYTES

__all__ = [
    "ACCEPTABLE",
    "CALL_TIMEOUT",
    "OVERLY_LARGE_REPR",
    "STREAM_WAIT",
    "ErrorRecords",
    "Overrides",
    "call",
    "methods",
    "raw_requests",
    "register_profiles",
    "requests",
    "texts",
]

ACCEPTABLE = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
"""OK, or a refusal that tells the caller what is wrong with its request or its standing;
never UNKNOWN or INTERNAL (a bug), nor UNAVAILABLE (the server, not the request, failed).
RESOURCE_EXHAUSTED: a request beyond gRPC's receive limit, or a cluster out of prefixes."""

CALL_TIMEOUT = 10.0
"""A unary call, or the start of a stream, that takes longer has hung: a failure."""
STREAM_WAIT = 0.3
"""How long a server stream is read for its first answer by default (a followed log may
never send); a service whose streams all answer at once may wait longer."""

OVERLY_LARGE_REPR = "ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning"
"""A ``filterwarnings`` mark for fuzz tests: hypothesis warns when it shows a drawn request
of a megabyte, which is what some requests are for."""

Overrides = Mapping[str, st.SearchStrategy[Any]]
"""A field's full name (``roleserve.curator.UpdateNodeStatusRequest.node_id``) → what to set
it to: a value, a list for a repeated field, a dict for a map, a message for a message."""

MAX_DEPTH = 4
"""Nesting of messages drawn; deeper message fields stay unset."""

ODD_TEXTS = (
    "",
    " ",
    "\x00",
    "\n",
    "é",
    "💥",
    "\u202e",
    "../../cluster/ticket",
    "custom:",
    "node-",
    "root",
    "-1",
    "%s%n",
)
UNICODE = st.characters(codec="utf-8")
"""Any character a protobuf string may hold: every code point but the surrogates."""
BAD_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"ok\x80")
"""Byte strings that are not UTF-8 (a lone continuation, an encoded surrogate, ...)."""

_INT_RANGES: dict[int, tuple[int, int]] = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def register_profiles() -> None:
    """Register the ``ci`` and ``long`` profiles and load one: ``long`` if the environment
    says ``ROLESERVE_FUZZ=long``, else ``ci``."""
    common: dict[str, Any] = {
        "deadline": None,  # a call to etcd may take a while on a busy machine
        "database": None,  # nothing written into the working tree
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    }
    settings.register_profile("ci", max_examples=30, **common)
    settings.register_profile("long", max_examples=1000, **common)
    settings.load_profile("long" if os.environ.get("ROLESERVE_FUZZ") == "long" else "ci")


def methods(*services: ServiceDescriptor) -> Iterator[MethodDescriptor]:
    """Every method of ``services``, in their order."""
    for service in services:
        yield from service.methods


# -- values ----------------------------------------------------------------------------


def texts() -> st.SearchStrategy[str]:
    """Strings a caller might send: short and odd, any Unicode, around the limits, huge."""
    return st.one_of(
        st.sampled_from(ODD_TEXTS),
        st.text(UNICODE, max_size=24),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.:", max_size=80),
        st.builds(lambda c, n: c * n, UNICODE, st.integers(60, 300)),
        st.integers(1_000, 200_000).map(lambda n: "x" * n),
        st.integers(1 << 20, (1 << 20) + 8).map(lambda n: "y" * n),  # beyond the request limit
    )


def _blobs() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=64),
        st.integers(1_000, 100_000).map(lambda n: b"\xab" * n),
    )


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return texts()
    if kind == FieldDescriptor.TYPE_BYTES:
        return _blobs()
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = [value.number for value in field.enum_type.values]
        low, high = -(2**31), 2**31 - 1  # proto3 enums are open: unknown numbers parse
        return st.one_of(st.sampled_from(known), st.integers(low, high))
    if kind in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return st.floats(width=32 if kind == FieldDescriptor.TYPE_FLOAT else 64)
    low, high = _INT_RANGES[kind]
    return st.one_of(
        st.sampled_from([low, -1, 0, 1, high] if low else [0, 1, high]), st.integers(low, high)
    )


REPEATED_BYTES = 2 << 20
"""What one entry repeated thousands of times may add up to: past the request limit, yet
not hundreds of megabytes when the entry is itself huge."""


def _size(value: Any) -> int:
    return (
        value.ByteSize()
        if isinstance(value, Message)
        else len(value)
        if isinstance(value, (str, bytes))
        else 8
    )


def _repeated(one: Any, count: int) -> list[Any]:
    return [one] * max(1, min(count, REPEATED_BYTES // max(1, _size(one))))


def _many(element: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """A few entries, or one entry thousands of times (cheap to draw, beyond any limit)."""
    return st.one_of(
        st.lists(element, max_size=4),
        st.builds(_repeated, element, st.integers(100, 5_000)),
    )


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _entry(field: FieldDescriptor, name: str) -> FieldDescriptor:
    """The ``key`` or ``value`` field of a map field's entry message."""
    assert field.message_type is not None
    return field.message_type.fields_by_name[name]


def _field(field: FieldDescriptor, overrides: Overrides, depth: int) -> st.SearchStrategy[Any]:
    if field.full_name in overrides:
        return overrides[field.full_name]
    if _is_map(field):
        key_field, value_field = _entry(field, "key"), _entry(field, "value")
        keys = _single(key_field, overrides, depth + 1)
        values = _single(value_field, overrides, depth + 1)
        return st.one_of(
            st.dictionaries(keys, values, max_size=4),
            st.builds(
                lambda value, n: {f"k{i}": value for i in range(len(_repeated(value, n)))},
                values,
                st.integers(50, 2_000),
            ),
        )
    single = _single(field, overrides, depth)
    return _many(single) if field.is_repeated else single


def _single(field: FieldDescriptor, overrides: Overrides, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None:
        return requests(field.message_type, overrides, depth=depth + 1)
    return _scalar(field)


def _set(message: Message, field: FieldDescriptor, value: Any) -> None:
    target = getattr(message, field.name)
    if _is_map(field):
        if _entry(field, "value").message_type is not None:
            for key, entry in value.items():
                target[key].CopyFrom(entry)
        else:
            target.update(value)
    elif field.is_repeated:
        target.extend(value)
    elif field.message_type is not None:
        target.CopyFrom(value)
    else:
        setattr(message, field.name, value)


def requests(
    descriptor: Descriptor, overrides: Overrides | None = None, *, depth: int = 0
) -> st.SearchStrategy[Message]:
    """Messages of ``descriptor``'s type, each field set or not, every value drawn as the
    module docstring says; ``overrides`` replace the strategies of the fields they name."""
    overrides = overrides or {}
    message_class = message_factory.GetMessageClass(descriptor)
    fields = [
        field
        for field in descriptor.fields
        if field.message_type is None or depth < MAX_DEPTH or field.full_name in overrides
    ]

    @st.composite
    def build(draw: Callable[..., Any]) -> Message:
        message: Message = message_class()
        for field in fields:
            if field.full_name in overrides or draw(st.booleans()):
                _set(message, field, draw(_field(field, overrides, depth)))
        return message

    return build()


# -- bytes that are no message ---------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string_paths(descriptor: Descriptor, depth: int = 0) -> list[tuple[int, ...]]:
    """Field number paths to every string field, through nested messages (and maps)."""
    paths: list[tuple[int, ...]] = []
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            paths.append((field.number,))
        elif field.message_type is not None and depth < MAX_DEPTH:
            paths += [
                (field.number, *rest) for rest in _string_paths(field.message_type, depth + 1)
            ]
    return paths


def _not_utf8(path: tuple[int, ...], bad: bytes) -> bytes:
    payload = bad
    for number in reversed(path):
        payload = _length_delimited(number, payload)
    return payload


def _mutated(data: bytes, position: int, action: int, byte: int) -> bytes:
    if not data:
        return bytes([byte])
    position %= len(data)
    if action == 0:
        return data[:position]  # cut short
    if action == 1:
        return data[:position] + bytes([byte]) + data[position + 1 :]  # one byte changed
    return data[:position] + bytes([byte]) + data[position:]  # one byte inserted


def raw_requests(
    descriptor: Descriptor, overrides: Overrides | None = None
) -> st.SearchStrategy[bytes]:
    """Bytes for a method taking ``descriptor``: random, a valid serialisation mutated, or a
    valid one with a string field (nested, too) that is not UTF-8 appended (the last
    occurrence of a field wins, so the message then carries the bad string)."""
    valid = requests(descriptor, overrides).map(lambda message: message.SerializeToString())
    choices: list[st.SearchStrategy[bytes]] = [
        st.binary(max_size=256),
        st.builds(_mutated, valid, st.integers(0, 1 << 16), st.integers(0, 2), st.integers(0, 255)),
    ]
    paths = _string_paths(descriptor)
    if paths:
        bad = st.builds(_not_utf8, st.sampled_from(paths), st.sampled_from(BAD_UTF8))
        choices.append(st.builds(bytes.__add__, valid, bad))
    return st.one_of(choices)


# -- calls -----------------------------------------------------------------------------


async def call(
    channel: Any,
    service: ServiceDescriptor,
    method: MethodDescriptor,
    payload: bytes,
    *,
    wait: float = STREAM_WAIT,
) -> tuple[grpc.StatusCode, str]:
    """Call ``method`` with the serialised request ``payload`` on ``channel`` (untyped:
    the call sends and receives bytes); its status code and details.

    A unary answer is awaited; a server stream is read until its first answer, its end, or
    ``wait`` seconds (``CALL_TIMEOUT`` for a payload beyond the request limit: its refusal
    comes once it has been sent), then cancelled: OK unless it ended with an error. A client
    stream sends ``payload`` as its one request.

    :raises TimeoutError: if a unary call has not answered within ``CALL_TIMEOUT``.
    """
    path = f"/{service.full_name}/{method.name}"
    try:
        if not method.server_streaming:
            with anyio.fail_after(CALL_TIMEOUT):
                if method.client_streaming:
                    rpc = channel.stream_unary(path)(iter([payload]), timeout=CALL_TIMEOUT)
                else:
                    rpc = channel.unary_unary(path)(payload, timeout=CALL_TIMEOUT)
                try:
                    await rpc
                except asyncio.CancelledError:
                    # grpc.aio raises a call that ended CANCELLED as CancelledError (the
                    # channel's unary() has let anyio take its own cancellations first).
                    return await rpc.code(), await rpc.details() or ""
            return grpc.StatusCode.OK, ""
        if len(payload) > MAX_REQUEST_BYTES:
            wait = CALL_TIMEOUT  # the refusal comes only once it has been sent
        if method.client_streaming:
            stream = channel.stream_stream(path)(iter([payload]))
        else:
            stream = channel.unary_stream(path)(payload)
        try:
            with anyio.move_on_after(wait):
                await stream.read()
        finally:
            stream.cancel()
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


class ErrorRecords(logging.Handler):
    """The ERROR (and worse) records that carry a traceback, logged while installed on the
    root logger: an exception a server did not expect. ``with ErrorRecords() as errors``."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None or record.exc_text:
            self.records.append(record)

    def take(self) -> list[str]:
        """The records so far, formatted (and forget them)."""
        taken, self.records = self.records, []
        formatter = logging.Formatter("%(name)s: %(message)s")
        return [formatter.format(record) for record in taken]

    def __enter__(self) -> ErrorRecords:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)
