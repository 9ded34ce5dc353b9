"""The signing secrets a dispatcher signs with, per caller: the rotated ones from the store
and the callers file's, cached for a few seconds (a rotation reaches every dispatcher within
``refresh_s``; the previous secret keeps signing far longer than that).

Bounded per caller and in callers: only the ``max_live`` newest stored secrets are read (and
opened) at a refresh, at most ``max_live`` sign, and at most ``max_callers`` callers' are
kept (least recently used dropped: read again at its next delivery)."""

from __future__ import annotations

from collections.abc import Sequence

from dispatcher.lru import Lru
from trigger_service.config.live_callers import Callers
from trigger_service.core.notify.signing import active_secrets
from trigger_service.core.ports import Clock, SecretStore


class SecretBook:
    def __init__(self, store: SecretStore, callers: Callers, clock: Clock,
                 overlap_s: int, *, max_live: int = 3, max_callers: int = 1_000,
                 refresh_s: float = 5.0) -> None:
        self._store = store
        self._callers = callers
        self._clock = clock
        self._overlap_ms = overlap_s * 1000
        self._max_live = max_live
        self._refresh_ms = int(refresh_s * 1000)
        self._cache: Lru[str, tuple[int, list[tuple[int, str]]]] = Lru(max_callers)

    async def for_caller(self, caller: str) -> Sequence[str]:
        """The caller's signing secrets now, the current one first, at most ``max_live``
        (empty: unsigned). Raises ``StoreError`` when they cannot be read (the attempt is not
        made unsigned)."""
        now_ms = self._clock.now_ms()
        cached = self._cache.get(caller)
        if cached is None or now_ms - cached[0] >= self._refresh_ms:
            cached = (now_ms, await self._store.secrets(caller, self._max_live))
            self._cache.put(caller, cached)
        return active_secrets(cached[1], self._callers.signing_secrets(caller), now_ms,
                              self._overlap_ms, self._max_live)

    def __len__(self) -> int:
        return len(self._cache)
