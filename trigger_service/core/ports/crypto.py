"""Encryption at rest: the boundaries (adapters in ``trigger_service.adapters.crypto``).

Envelope encryption: each value is sealed with AES-256-GCM under a data key; the data key is
wrapped by a key-encryption key (KEK) from a ``KeySource`` (a local key file, or AWS KMS), and
the sealed value carries the KEK's id and the wrapped data key, so a value stays readable
after the current KEK changes as long as its KEK is still known. A process makes one data key
and wraps it once; it unwraps each other data key once (cached).

A sealed value is text starting with ``SEALED_PREFIX``; anything else is a value written in
clear (before encryption, or with payload encryption off) and reads as itself. No stored
plaintext starts with the prefix: payloads and plans are JSON, signing secrets ``whsec_``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

SEALED_PREFIX: Final = "enc1:"


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


class KeySource(Protocol):
    """Key-encryption keys: the current one wraps, any known one unwraps."""

    @property
    def current_key_id(self) -> str:
        """The id of the KEK that wraps new data keys (stored with every sealed value)."""
        ...

    def knows(self, key_id: str) -> bool:
        """Whether this source holds the KEK ``key_id`` (without a network call)."""
        ...

    async def wrap(self, data_key: bytes) -> bytes:
        """``data_key`` wrapped by the current KEK. Raises ``CipherError``."""
        ...

    async def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        """The data key ``wrapped`` by KEK ``key_id``. Raises ``CipherError`` (unknown KEK,
        tampered wrapping, key service unreachable)."""
        ...


class Cipher(Protocol):
    """Seals and opens stored text. ``context`` binds a value to where it is stored (its
    row and column): a value copied elsewhere does not open."""

    def seal(self, plaintext: str, context: str) -> str:
        """``plaintext`` encrypted under this process's data key (no I/O)."""
        ...

    async def open(self, value: str, context: str) -> str:
        """The plaintext of a sealed ``value``; an unsealed one as it is. Raises
        ``CipherError`` (unknown KEK, tampered value, wrong context)."""
        ...

    def is_current(self, value: str) -> bool:
        """Sealed under the current KEK (nothing for ``reencrypt`` to do)."""
        ...


@dataclass(frozen=True, slots=True)
class ResealReport:
    """What one ``reencrypt`` pass over a table did."""

    scanned: int = 0
    resealed: int = 0
    # Values that could not be opened (logged; left as they are), and rows whose value
    # changed under the pass (written since with the writer's key: nothing lost).
    failed: int = 0
    raced: int = 0


class Resealer(Protocol):
    """Moves stored values to the current key (``python -m reconciler --reencrypt``)."""

    async def reseal_secrets(self) -> ResealReport:
        """Every signing secret not sealed under the current KEK, sealed under it (one
        conditional write each: a concurrent change wins). Raises ``StoreError``."""
        ...

    async def reseal_triggers(self) -> ResealReport:
        """Every trigger row's payload and plan sealed under an older KEK (or in clear when
        payload encryption is on), sealed under the current one, keeping each cell's TTL.
        Raises ``StoreError``."""
        ...
