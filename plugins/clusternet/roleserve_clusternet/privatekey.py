"""The node's WireGuard key: an X25519 private key, made once, kept in the data directory.

The file holds the key as WireGuard writes it (``wg genkey``): 32 bytes in base64 and a
newline, mode 0600. It is made on the first start and read at every later one, so the
node keeps its public key, which every other node knows it by. A file that exists but does
not hold a key (cut short, edited, another format) is ``KeyFileError``, final: it is never
replaced, since a new key silently changes the node's identity in the mesh.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from roleserve_clusternet.errors import KeyFileError
from roleserve_core import write_atomically

__all__ = ["KEY_FILE", "WireGuardKey", "decode_key", "load_or_create_key"]

KEY_FILE = "private.key"
"""The key file's name in the plugin's data directory."""


@dataclass(frozen=True)
class WireGuardKey:
    """A private key and its public key, as raw 32-byte strings."""

    private: bytes
    public: bytes

    @classmethod
    def generate(cls) -> WireGuardKey:
        """A new random key."""
        return cls.of(X25519PrivateKey.generate().private_bytes_raw())

    @classmethod
    def of(cls, private: bytes) -> WireGuardKey:
        """The key whose private half is ``private`` (32 bytes)."""
        key = X25519PrivateKey.from_private_bytes(private)
        return cls(key.private_bytes_raw(), key.public_key().public_bytes_raw())

    @property
    def public_base64(self) -> str:
        """The public key as the curator and ``wg`` show it."""
        return base64.b64encode(self.public).decode()

    def __repr__(self) -> str:
        return f"WireGuardKey(public={self.public_base64})"  # never the private half


def decode_key(text: str) -> bytes:
    """The 32 bytes of a base64 WireGuard key.

    :raises ValueError: if ``text`` is not 32 bytes of base64.
    """
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    if len(raw) != 32:
        raise ValueError(f"{len(raw)} bytes, not 32")
    return raw


def load_or_create_key(directory: Path) -> WireGuardKey:
    """The key in ``directory/private.key``; a new one written there if there is none.

    Blocking: call it in a worker thread.

    :raises KeyFileError: the file cannot be read or written, or holds no key (final).
    """
    path = directory / KEY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = None
    except OSError as exc:
        raise KeyFileError(path, f"cannot be read: {exc.strerror or exc}") from exc
    if data is None:
        key = WireGuardKey.generate()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            write_atomically(path, base64.b64encode(key.private) + b"\n", 0o600)
        except OSError as exc:
            raise KeyFileError(path, f"cannot be written: {exc.strerror or exc}") from exc
        return key
    try:
        text = data.decode("ascii")
        return WireGuardKey.of(decode_key(text))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise KeyFileError(
            path,
            f"is corrupt ({exc if not isinstance(exc, UnicodeDecodeError) else 'not text'}); "
            "remove it to make a new key (the node's public key changes)",
        ) from None
    finally:
        _check_mode(path)


def _check_mode(path: Path) -> None:
    """Tighten a key file others can read to 0600 (it was copied in with 0644, say)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            os.chmod(path, 0o600)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise KeyFileError(path, f"cannot be made 0600: {exc.strerror or exc}") from exc
