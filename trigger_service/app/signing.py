"""Rotating a caller's signing secret (``POST /v1/signing-secrets/rotate``); which secrets
sign is :func:`trigger_service.core.notify.signing.active_secrets`. A secret is shown once, in the
rotation's answer, and never logged.

A caller's stored secrets stay few: a rotation deletes the ones that no longer sign (past
their overlap, or beyond the ``max_live`` newest), and rotations are rate limited per caller
(a token bucket of ``rotations_per_minute``, refilled over the minute), so a caller rotating in
a loop is refused with 429 ``rate_limited`` and ``Retry-After`` instead of growing the table
and every delivery's signature list.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from trigger_service.config.settings import Settings
from trigger_service.core.errors import AdapterError, RateLimited
from trigger_service.core.notify.signing import new_secret, retire_before
from trigger_service.core.ports import Clock, SecretStore
from trigger_service.core.ports.limit import BucketRule, RateLimiter

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Rotated:
    secret: str
    created_at_ms: int
    previous_valid_until_ms: int


@dataclass(frozen=True, slots=True)
class RotationPolicy:
    overlap_s: int = 86_400
    max_live: int = 3  # secrets that sign at once (stored ones kept), at most
    rotations_per_minute: int = 3

    @classmethod
    def of(cls, settings: Settings) -> RotationPolicy:
        d = settings.dispatch
        return cls(d.secret_rotation_overlap_s, d.secret_max_live,
                   settings.api.secret_rotations_per_minute)

    @property
    def rule(self) -> BucketRule:
        return BucketRule(self.rotations_per_minute / 60, self.rotations_per_minute)


def rotation_key(caller: str) -> str:
    """The rate limiter's key of ``caller``'s rotations (a caller name has no ``:``, so it
    never meets a caller's request bucket, keyed by the bare name)."""
    return f"signing-rotation:{caller}"


class SigningSecrets:
    def __init__(self, store: SecretStore, clock: Clock, limiter: RateLimiter,
                 policy: RotationPolicy) -> None:
        self._store = store
        self._clock = clock
        self._limiter = limiter
        self._policy = policy
        self._overlap_ms = policy.overlap_s * 1000

    async def rotate(self, caller: str) -> Rotated:
        """Make a new current secret; the previous ones sign for the overlap still (the
        ``max_live - 1`` newest of them). Raises ``RateLimited`` past the caller's rotations
        per minute, ``StoreError``."""
        await self._admit(caller)
        secret = new_secret()
        # Another rotation of this millisecond moves ours to the next one (never lost).
        now_ms = await self._store.add_secret(caller, self._clock.now_ms(), secret)
        log.info("signing_secret_rotated", caller=caller)  # never the secret itself
        # The newest max_live + 1: enough to see where signing stops (older ones never sign).
        stored = await self._store.secrets(caller, self._policy.max_live + 1)
        before_ms = retire_before(stored, now_ms, self._overlap_ms, self._policy.max_live)
        if before_ms is not None:
            await self._store.retire_secrets(caller, before_ms)
        return Rotated(secret, now_ms, now_ms + self._overlap_ms)

    async def _admit(self, caller: str) -> None:
        rule = self._policy.rule
        try:
            decision = await self._limiter.take(rotation_key(caller), rule)
        except AdapterError as e:
            # Open, as the request rate limit: the live-secret cap bounds what is kept anyway.
            log.warning("rotation_limit_unavailable", caller=caller, error=str(e))
            return
        if not decision.allowed:
            raise RateLimited(f"more than {rule.burst} signing-secret rotations per minute; "
                              "retry after the seconds Retry-After gives",
                              decision.retry_after_s)
