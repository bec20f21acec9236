"""The node's data directory: its lock, its key files and its saved messages."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roleserve_core.datadir import NodeDataDirectory
from roleserve_core.errors import CredentialsError, DataDirectoryError
from roleserve_core.identity import node_id, private_key_to_pem
from roleserve_core.proto import node_pb2


@pytest.fixture
def datadir(tmp_path: Path) -> NodeDataDirectory:
    return NodeDataDirectory(tmp_path / "node1")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the lock -----------------------------------------------------------------------------


def test_the_lock_creates_the_directory_and_records_the_holder(
    datadir: NodeDataDirectory,
) -> None:
    with datadir.locked():
        assert mode(datadir.node) == 0o700
        assert (datadir.node / "lock").read_text() == f"{os.getpid()}\n"


def test_the_lock_refuses_a_second_holder_in_the_same_process(
    datadir: NodeDataDirectory,
) -> None:
    """flock belongs to the open file description, so a second open conflicts even here."""
    with datadir.locked():
        with pytest.raises(DataDirectoryError) as caught, datadir.locked():
            pytest.fail("a second holder got the lock")
        assert str(caught.value) == f"{datadir.root} is in use by another roleserve node process"
        # The refused attempt leaves the holder's record alone.
        assert (datadir.node / "lock").read_text() == f"{os.getpid()}\n"


def test_the_lock_refuses_another_process(datadir: NodeDataDirectory) -> None:
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from roleserve_core.datadir import NodeDataDirectory
        from roleserve_core.errors import DataDirectoryError
        try:
            with NodeDataDirectory(Path({str(datadir.root)!r})).locked():
                print("locked")
        except DataDirectoryError as exc:
            print(exc)
        """
    )

    def other_process() -> str:
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
        )
        return result.stdout.strip()

    with datadir.locked():
        assert other_process() == f"{datadir.root} is in use by another roleserve node process"
    assert other_process() == "locked"


def test_the_lock_is_free_again_after_the_block(datadir: NodeDataDirectory) -> None:
    with datadir.locked():
        pass
    with datadir.locked():
        pass
    with pytest.raises(RuntimeError, match="inside"), datadir.locked():
        raise RuntimeError("inside")
    with datadir.locked():
        pass


# -- keys ---------------------------------------------------------------------------------


def test_a_key_is_made_once_and_reused(datadir: NodeDataDirectory) -> None:
    datadir.create()
    first = datadir.load_or_create_key(datadir.key)
    assert mode(datadir.key) == 0o600
    saved = datadir.key.read_bytes()
    assert saved == private_key_to_pem(first)

    again = datadir.load_or_create_key(datadir.key)
    assert node_id(again.public_key()) == node_id(first.public_key())
    assert datadir.key.read_bytes() == saved


def test_the_join_key_is_another_key(datadir: NodeDataDirectory) -> None:
    datadir.create()
    key = datadir.load_or_create_key(datadir.key)
    join_key = datadir.load_or_create_key(datadir.join_key)
    assert node_id(key.public_key()) != node_id(join_key.public_key())
    assert mode(datadir.join_key) == 0o600


@pytest.mark.parametrize(
    "content",
    [b"", b"not a key\n", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"],
)
def test_a_corrupt_key_is_refused_not_replaced(datadir: NodeDataDirectory, content: bytes) -> None:
    """Replacing it would change the node's identity without a word."""
    datadir.create()
    datadir.key.write_bytes(content)
    with pytest.raises(CredentialsError) as caught:
        datadir.load_or_create_key(datadir.key)
    assert str(datadir.key) in str(caught.value)
    assert "is not a PEM private key" in str(caught.value)
    assert datadir.key.read_bytes() == content


def test_an_unreadable_key_is_refused(datadir: NodeDataDirectory) -> None:
    datadir.create()
    datadir.key.mkdir()  # reading a directory fails for root too
    with pytest.raises(CredentialsError, match=re.escape(str(datadir.key))):
        datadir.load_or_create_key(datadir.key)


# -- saved messages -----------------------------------------------------------------------


def test_a_message_round_trips(datadir: NodeDataDirectory) -> None:
    datadir.create()
    written = node_pb2.KnownCurators(seeds=["127.0.0.11:7835"], curators=["127.0.0.12:7835"])
    datadir.write_message(datadir.curators, written)
    assert mode(datadir.curators) == 0o600

    read = node_pb2.KnownCurators()
    assert datadir.read_message(datadir.curators, read) is True
    assert read == written


def test_a_missing_message_is_false_and_leaves_the_message_alone(
    datadir: NodeDataDirectory,
) -> None:
    message = node_pb2.KnownCurators(seeds=["127.0.0.11:7835"])
    assert datadir.read_message(datadir.curators, message) is False
    assert list(message.seeds) == ["127.0.0.11:7835"]


def test_a_corrupt_message_is_refused_naming_the_file(datadir: NodeDataDirectory) -> None:
    datadir.create()
    datadir.registration.write_bytes(b"\x0a\x05ab")  # field 1 says 5 bytes follow; 2 do
    with pytest.raises(DataDirectoryError) as caught:
        datadir.read_message(datadir.registration, node_pb2.PendingRegistration())
    assert str(caught.value) == f"{datadir.registration} is corrupt"


def test_an_unreadable_message_is_refused_naming_the_file(datadir: NodeDataDirectory) -> None:
    datadir.create()
    datadir.registration.mkdir()
    with pytest.raises(DataDirectoryError) as caught:
        datadir.read_message(datadir.registration, node_pb2.PendingRegistration())
    assert str(caught.value).startswith(f"{datadir.registration} cannot be read: ")


def test_enrolled_is_whether_the_credentials_directory_exists(
    datadir: NodeDataDirectory,
) -> None:
    datadir.create()
    before = datadir.enrolled
    datadir.credentials.mkdir()
    assert (before, datadir.enrolled) == (False, True)
    assert datadir.plugin("core") == datadir.root / "plugins" / "core"
