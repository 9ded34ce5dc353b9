"""``EnvelopeCipher``: AES-256-GCM under one data key per process, wrapped once by the
current key-encryption key (``core.ports.crypto.KeySource``).

A sealed value is ``enc1:`` and the unpadded url-safe base64 of::

    [1 byte n][n bytes KEK id][2 bytes m][m bytes wrapped data key][12 bytes nonce][ciphertext+tag]

The GCM associated data is the context and that header: a value moved to another row or
column, or given another KEK id, does not open. Sealing costs one AES-GCM pass (no I/O);
opening unwraps each data key once per process (a KMS call at most once per key).

A data key seals at most ``RENEW_AFTER_SEALS`` values before the cipher wraps a new one in the
background (one KMS call) and seals with that: random 96-bit nonces stay far below the 2**32
messages per key that GCM allows (a process sealing 10,000 values a second for weeks would
pass it). Until the new key is wrapped the old one goes on sealing; a failed wrap is tried
again at the next seal.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import Sequence

import structlog
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from trigger_service.core.errors import CipherError
from trigger_service.core.ports.crypto import SEALED_PREFIX, KeySource, is_sealed

log = structlog.get_logger(__name__)

_NONCE_BYTES = 12
RENEW_AFTER_SEALS = 2**24
# Data keys of other processes (and of older KEKs) unwrapped so far; a pass over many rows
# meets a few hundred at most (one per process start), so a full cache is simply emptied.
_UNWRAPPED_MAX = 4096


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def _header(key_id: str, wrapped: bytes) -> bytes:
    kid = key_id.encode()
    return struct.pack("!B", len(kid)) + kid + struct.pack("!H", len(wrapped)) + wrapped


def _parse(value: str) -> tuple[str, bytes, bytes, bytes, bytes]:
    """(KEK id, wrapped data key, header, nonce, ciphertext) of a sealed value."""
    try:
        body = value[len(SEALED_PREFIX):]
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        n = raw[0]
        key_id = raw[1:1 + n].decode()
        (m,) = struct.unpack_from("!H", raw, 1 + n)
        start = 3 + n
        wrapped = raw[start:start + m]
        nonce = raw[start + m:start + m + _NONCE_BYTES]
        sealed = raw[start + m + _NONCE_BYTES:]
    except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
        raise CipherError("a sealed value is malformed") from e
    if len(wrapped) != m or len(nonce) != _NONCE_BYTES or not sealed:
        raise CipherError("a sealed value is truncated")
    return key_id, wrapped, raw[:start + m], nonce, sealed


class EnvelopeCipher:
    def __init__(self, sources: Sequence[KeySource], data_key: bytes, wrapped: bytes, *,
                 renew_after_seals: int = RENEW_AFTER_SEALS) -> None:
        """Use :meth:`create`."""
        self._sources = tuple(sources)
        self._key_id = sources[0].current_key_id
        self._unwrapped: dict[tuple[str, bytes], AESGCM] = {}
        self._use(data_key, wrapped)
        self._renew_after = renew_after_seals
        self._renewal: asyncio.Task[None] | None = None

    @classmethod
    async def create(cls, sources: Sequence[KeySource]) -> EnvelopeCipher:
        """A cipher whose new data key is wrapped by ``sources[0]``'s current KEK (one call);
        every source unwraps the KEKs it knows. Raises ``CipherError``."""
        if not sources:
            raise CipherError("no key source")
        data_key = new_data_key()
        return cls(sources, data_key, await sources[0].wrap(data_key))

    @property
    def current_key_id(self) -> str:
        return self._key_id

    def _use(self, data_key: bytes, wrapped: bytes) -> None:
        self._aead = AESGCM(data_key)
        self._header = _header(self._key_id, wrapped)
        self._unwrapped[(self._key_id, wrapped)] = self._aead
        self._sealed = 0

    def _renew_soon(self) -> None:
        """Start wrapping a new data key, unless one is on its way or no loop runs here (a
        script sealing outside one keeps its key)."""
        if self._renewal is not None and not self._renewal.done():
            return
        try:
            self._renewal = asyncio.get_running_loop().create_task(self._renew())
        except RuntimeError:
            pass

    async def _renew(self) -> None:
        data_key = new_data_key()
        try:
            wrapped = await self._sources[0].wrap(data_key)
        except CipherError as e:
            log.warning("data_key_renewal_failed", error=str(e))  # tried again next seal
            return
        self._use(data_key, wrapped)

    def seal(self, plaintext: str, context: str) -> str:
        self._sealed += 1
        if self._sealed >= self._renew_after:
            self._renew_soon()
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), self._aad(context, self._header))
        return SEALED_PREFIX + base64.urlsafe_b64encode(
            self._header + nonce + sealed).decode().rstrip("=")

    async def open(self, value: str, context: str) -> str:
        if not is_sealed(value):
            return value
        key_id, wrapped, header, nonce, sealed = _parse(value)
        aead = self._unwrapped.get((key_id, wrapped))
        if aead is None:
            aead = AESGCM(await self._source(key_id).unwrap(key_id, wrapped))
            if len(self._unwrapped) >= _UNWRAPPED_MAX:
                self._unwrapped.clear()
            self._unwrapped[(key_id, wrapped)] = aead
        try:
            return aead.decrypt(nonce, sealed, self._aad(context, header)).decode()
        except InvalidTag as e:
            raise CipherError(f"a value sealed under key {key_id!r} does not open here "
                              "(altered, or moved from where it was sealed)") from e

    def is_current(self, value: str) -> bool:
        if not is_sealed(value):
            return False
        try:
            return _parse(value)[0] == self._key_id
        except CipherError:
            return False

    def _source(self, key_id: str) -> KeySource:
        for source in self._sources:
            if source.knows(key_id):
                return source
        raise CipherError(f"encryption key {key_id!r} is not known here (removed from the key "
                          "file, or another KMS key)")

    @staticmethod
    def _aad(context: str, header: bytes) -> bytes:
        return context.encode() + b"\0" + header
