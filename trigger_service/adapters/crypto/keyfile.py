"""``KeyFile``: key-encryption keys from a local file (``TRIGGER_ENCRYPTION_KEY_FILE``), for
development and for deployments without KMS.

The file holds one key a line, ``<key-id> <base64 of 32 random bytes>`` (``#`` starts a
comment); the first line's key wraps new data keys, every line's unwraps. Rotation: add a
line at the end everywhere (every process can read what the new key will wrap), then move
it first (processes restarted with it wrap with it), then ``python -m reconciler
--reencrypt``, then drop the old line. ``python -m trigger_service.platform.keys`` writes the lines.
A wrapped data key is AES-256-GCM under the KEK with the KEK's id as associated data.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from trigger_service.core.errors import CipherError, ConfigError

# Ids in sealed values: the source's prefix, then the line's id (KMS ids have their own).
KEY_ID_PREFIX: Final = "file:"
_SETTING = "TRIGGER_ENCRYPTION_KEY_FILE"
_NONCE_BYTES = 12


class KeyFile:
    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        """``keys``: (id, 32-byte key), the current first. Use :meth:`load` for a file."""
        if not keys:
            raise ConfigError(f"{_SETTING}: the file holds no key")
        self._current = KEY_ID_PREFIX + keys[0][0]
        self._keys = {KEY_ID_PREFIX + kid: AESGCM(key) for kid, key in keys}

    @classmethod
    def load(cls, path: Path) -> KeyFile:
        """The keys of ``path``. Raises ``ConfigError`` (missing, unreadable, malformed)."""
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"{_SETTING}={path}: {e.strerror} (create one with "
                              "`python -m trigger_service.platform.keys add --current`)") from e
        return cls(parse_keys(text, path))

    @property
    def current_key_id(self) -> str:
        return self._current

    def knows(self, key_id: str) -> bool:
        return key_id in self._keys

    async def wrap(self, data_key: bytes) -> bytes:
        return self.wrap_now(data_key)

    def wrap_now(self, data_key: bytes) -> bytes:
        """:meth:`wrap` without an event loop (a file's key needs no I/O)."""
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self._keys[self._current].encrypt(nonce, data_key, self._current.encode())

    async def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        kek = self._keys.get(key_id)
        if kek is None:
            raise CipherError(f"encryption key {key_id!r} is not in the key file")
        try:
            return kek.decrypt(wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], key_id.encode())
        except InvalidTag as e:
            raise CipherError(f"a data key wrapped by {key_id!r} does not unwrap "
                              "(altered, or the key file's key changed)") from e


def parse_keys(text: str, path: Path) -> list[tuple[str, bytes]]:
    """The (id, key) lines of a key file's text, in order. Raises ``ConfigError``."""
    keys: list[tuple[str, bytes]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError("expected `<key-id> <base64 key>`")
            key = base64.b64decode(parts[1], validate=True)
            if len(key) != 32:
                raise ValueError("a key is 32 bytes (AES-256)")
        except (ValueError, binascii.Error) as e:
            raise ConfigError(f"{_SETTING}={path} line {n}: {e}") from e
        if any(kid == parts[0] for kid, _ in keys):
            raise ConfigError(f"{_SETTING}={path} line {n}: key id {parts[0]!r} twice")
        keys.append((parts[0], key))
    return keys


def add_key(path: Path, key_id: str, *, current: bool) -> None:
    """Add a new random key ``key_id`` to ``path`` (created, mode 0600, if missing): first if
    ``current`` (or the file is new), else last. Raises ``ConfigError``."""
    old = path.read_text() if path.exists() else ""
    if any(kid == key_id for kid, _ in parse_keys(old, path)):
        raise ConfigError(f"{_SETTING}={path}: key id {key_id!r} is there already")
    line = f"{key_id} {base64.b64encode(secrets.token_bytes(32)).decode()}\n"
    if old and not old.endswith("\n"):
        old += "\n"
    text = line + old if current else old + line
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)
