"""A node's data directory: everything it keeps across restarts, in one place.

::

    D/
    ├── roleserve.toml          configuration (optional; see ``config``)
    ├── node/                   the core's own state (0700)
    │   ├── lock                held while a node process runs on D
    │   ├── key.pem             the node's private key: its ID (0600)
    │   ├── address             the address other nodes reach it at, kept from the first start
    │   ├── join-key.pem        the key a registered node proves itself with (0600)
    │   ├── credentials/        ca.pem cert.pem key.pem, once enrolled
    │   ├── bootstrapping       present while a bootstrap is unfinished (owner dir inside)
    │   ├── registration.pb     present while a registration is unfinished
    │   └── curators.pb         curator endpoints to find the cluster again
    └── plugins/<name>/         each plugin's own directory (the core's holds roles.pb)

The address is saved once an enrolment starts: the node's etcd peer URL, its curator
endpoint in other nodes' directories and its record in the curator all name it, so a later
start without ``--address`` must not detect another one.

Whether the node is enrolled is whether ``node/credentials`` exists: every enrolment path
writes it last, so a crash before that point resumes the enrolment at the next start, and a
crash after it finds an enrolled node.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError, Message

from roleserve_core.config import IPAddress, parse_address
from roleserve_core.errors import ConfigError, CredentialsError, DataDirectoryError, IdentityError
from roleserve_core.files import write_atomically
from roleserve_core.identity import (
    PrivateKey,
    generate_key,
    node_id,
    private_key_from_pem,
    private_key_to_pem,
)

__all__ = ["CONFIG_FILE", "NodeDataDirectory"]

CONFIG_FILE = "roleserve.toml"


@dataclass(frozen=True)
class NodeDataDirectory:
    """The paths of one node's data directory, and the few operations on them."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def node(self) -> Path:
        return self.root / "node"

    @property
    def key(self) -> Path:
        return self.node / "key.pem"

    @property
    def join_key(self) -> Path:
        return self.node / "join-key.pem"

    @property
    def credentials(self) -> Path:
        return self.node / "credentials"

    @property
    def bootstrapping(self) -> Path:
        return self.node / "bootstrapping"

    @property
    def registration(self) -> Path:
        return self.node / "registration.pb"

    @property
    def curators(self) -> Path:
        return self.node / "curators.pb"

    @property
    def address(self) -> Path:
        return self.node / "address"

    def read_address(self) -> IPAddress | None:
        """The address saved by the node's first start; None before it was saved.

        :raises DataDirectoryError: naming the file if it is unreadable or not an address.
        """
        try:
            text = self.address.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DataDirectoryError(f"{self.address} cannot be read: {exc.strerror}") from None
        try:
            return parse_address(text, str(self.address))
        except ConfigError as exc:
            raise DataDirectoryError(f"{exc}; the file is corrupt") from None

    def save_address(self, address: IPAddress) -> None:
        """Keep ``address`` as the node's own, for every later start."""
        write_atomically(self.address, f"{address}\n".encode(), 0o600)

    def plugin(self, name: str) -> Path:
        """The directory of plugin ``name`` (its ``NodeContext.data_dir``)."""
        return self.root / "plugins" / name

    @property
    def enrolled(self) -> bool:
        """Whether the node has its credentials (it joins with them)."""
        return self.credentials.is_dir()

    def create(self) -> None:
        """Create the directory and ``node/`` (0700) if they do not exist."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.node.mkdir(mode=0o700, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory's lock: one node process per data directory.

        :raises DataDirectoryError: if another process holds it.
        """
        self.create()
        descriptor = os.open(self.node / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DataDirectoryError(
                    f"{self.root} is in use by another roleserve node process"
                ) from None
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"{os.getpid()}\n".encode())
            yield
        finally:
            os.close(descriptor)

    def read_node_id(self) -> str | None:
        """The node's ID, from its key; None before the node made one.

        :raises IdentityError: if the key file holds no usable key.
        """
        try:
            key = private_key_from_pem(self.key.read_bytes(), str(self.key))
        except OSError:
            return None
        return node_id(key.public_key())

    def load_or_create_key(self, path: Path) -> PrivateKey:
        """The private key at ``path``, made (0600) if there is none yet.

        :raises CredentialsError: if the file exists but holds no usable key.
        """
        if path.exists():
            try:
                return private_key_from_pem(path.read_bytes(), str(path))
            except (OSError, IdentityError) as exc:
                raise CredentialsError(str(exc)) from None
        key = generate_key()
        write_atomically(path, private_key_to_pem(key), 0o600)
        return key

    def read_message(self, path: Path, message: Message) -> bool:
        """Parse ``path`` into ``message``; False if the file does not exist.

        :raises DataDirectoryError: naming the file if it is unreadable or corrupt.
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise DataDirectoryError(f"{path} cannot be read: {exc.strerror}") from None
        try:
            message.ParseFromString(data)
        except DecodeError:
            raise DataDirectoryError(f"{path} is corrupt") from None
        return True

    def write_message(self, path: Path, message: Message) -> None:
        """Write ``message`` to ``path`` atomically (0600)."""
        write_atomically(path, message.SerializeToString(), 0o600)
