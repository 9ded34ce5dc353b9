"""Rotating a caller's signing secret (``POST /v1/signing-secrets/rotate``); which secrets
sign is :func:`trigger_service.core.notify.signing.active_secrets`. A secret is shown once, in the
rotation's answer, and never logged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from trigger_service.core.notify.signing import active_secrets, new_secret
from trigger_service.core.ports import Clock, SecretStore

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Rotated:
    secret: str
    created_at_ms: int
    previous_valid_until_ms: int


class SigningSecrets:
    def __init__(self, store: SecretStore, clock: Clock, overlap_s: int) -> None:
        self._store = store
        self._clock = clock
        self._overlap_ms = overlap_s * 1000

    async def rotate(self, caller: str) -> Rotated:
        """Make a new current secret; the previous ones sign for the overlap still."""
        secret = new_secret()
        # Another rotation of this millisecond moves ours to the next one (never lost).
        now_ms = await self._store.add_secret(caller, self._clock.now_ms(), secret)
        log.info("signing_secret_rotated", caller=caller)  # never the secret itself
        return Rotated(secret, now_ms, now_ms + self._overlap_ms)

    async def active(self, caller: str, file_secrets: Sequence[str]) -> list[str]:
        return active_secrets(await self._store.secrets(caller), file_secrets,
                              self._clock.now_ms(), self._overlap_ms)
