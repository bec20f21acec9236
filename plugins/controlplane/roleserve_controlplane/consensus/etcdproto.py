"""etcd's gRPC messages and stubs, as etcd3aio generates them: the one module of the plugin
that imports etcd3aio's private ``_protobuf``.

etcd3aio exports its services (``KVService``, ``LeaseService``, ...), not the messages and
stubs under them, and two calls here need those. The Watch stream (``watchstream``), since
etcd3aio's ``WatchService.watch`` leaks a task per ended watch (its docstring says how).
And one lease renewal (``EtcdClient.keep_alive``), sent as one request from a plain
iterator, which grpc.aio consumes at once; ``LeaseService.keep_alive`` sends it from an
async generator, which a cancelled call can leave suspended for the collector to close.
etcd3aio's generated modules are importable only through ``_protobuf`` (it puts their
directory on ``sys.path``, under the top-level name ``etcd``), so this adapter imports that,
here alone: an etcd3aio release that moves them breaks this module, and nothing else.
"""

from __future__ import annotations

from etcd3aio._protobuf import (
    LeaseKeepAliveRequest,
    LeaseStub,
    WatchCreateRequest,
    WatchRequest,
    WatchResponse,
    WatchStub,
)

__all__ = [
    "LeaseKeepAliveRequest",
    "LeaseStub",
    "WatchCreateRequest",
    "WatchRequest",
    "WatchResponse",
    "WatchStub",
]
