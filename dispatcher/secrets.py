"""The signing secrets a dispatcher signs with, per caller: the rotated ones from the store
and the callers file's, cached for a few seconds (a rotation reaches every dispatcher within
``refresh_s``; the previous secret keeps signing far longer than that)."""

from __future__ import annotations

from collections.abc import Sequence

from trigger_service.config.live_callers import Callers
from trigger_service.core.notify.signing import active_secrets
from trigger_service.core.ports import Clock, SecretStore


class SecretBook:
    def __init__(self, store: SecretStore, callers: Callers, clock: Clock,
                 overlap_s: int, *, refresh_s: float = 5.0) -> None:
        self._store = store
        self._callers = callers
        self._clock = clock
        self._overlap_ms = overlap_s * 1000
        self._refresh_ms = int(refresh_s * 1000)
        self._cache: dict[str, tuple[int, list[tuple[int, str]]]] = {}

    async def for_caller(self, caller: str) -> Sequence[str]:
        """The caller's signing secrets now, the current one first (empty: unsigned).
        Raises ``StoreError`` when they cannot be read (the attempt is not made unsigned)."""
        now_ms = self._clock.now_ms()
        cached = self._cache.get(caller)
        if cached is None or now_ms - cached[0] >= self._refresh_ms:
            cached = (now_ms, await self._store.secrets(caller))
            self._cache[caller] = cached
        return active_secrets(cached[1], self._callers.signing_secrets(caller), now_ms,
                              self._overlap_ms)
