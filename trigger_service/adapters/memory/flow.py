"""In-memory ``FlowLimiter`` and ``FlowBoard`` (one process: tests only). The same
arithmetic as the Lua scripts of ``adapters.redis.flow_control``; ``fail`` makes every call
raise ``CacheError``."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import replace

from trigger_service.core.errors import CacheError
from trigger_service.core.flow import EPSILON_MS, FlowScope, earliest_gap
from trigger_service.core.ports.flow import Admission, FlowView

# A member's slot is remembered this long after its start (as on Redis).
KEEP_RESERVED_MS = 600_000


class MemoryFlowLimiter:
    def __init__(self) -> None:
        self.fail = False
        # Each by scope (a key in its caller's namespace), as the Redis keys.
        self._runs: dict[FlowScope, list[tuple[float, float]]] = {}  # sorted, disjoint
        self._held: dict[FlowScope, dict[str, int]] = {}  # member → start ms
        self._leases: dict[FlowScope, dict[str, int]] = {}  # holder → until ms
        self._starts: dict[FlowScope, list[int]] = {}  # admitted starts (ms), sorted

    def _check(self) -> None:
        if self.fail:
            raise CacheError("memory flow limiter told to fail")

    async def reserve(self, scope: FlowScope, member: str, at_ms: int, width_ms: float,
                      now_ms: int) -> int:
        self._check()
        held = self._held.setdefault(scope, {})
        for m in [m for m, start in held.items() if start < now_ms - KEEP_RESERVED_MS]:
            del held[m]
        if member in held:
            return held[member]
        runs = [r for r in self._runs.get(scope, []) if r[1] > now_ms]
        t = earliest_gap(runs, float(max(at_ms, now_ms)), width_ms)
        i = bisect.bisect_left(runs, (t, t))
        start, end = t, t + width_ms
        if i > 0 and abs(runs[i - 1][1] - t) < EPSILON_MS:  # touches the run before
            i -= 1
            start = runs.pop(i)[0]
        if i < len(runs) and abs(runs[i][0] - end) < EPSILON_MS:  # and the one after
            end = runs.pop(i)[1]
        runs.insert(i, (start, end))
        self._runs[scope] = runs
        held[member] = math.ceil(t - EPSILON_MS)
        return held[member]

    async def admit(self, scope: FlowScope, holder: str, now_ms: int, lease_ms: int,
                    parallelism: int | None, window: tuple[int, int] | None
                    ) -> tuple[Admission, int]:
        self._check()
        leases = {h: u for h, u in self._leases.get(scope, {}).items() if u > now_ms}
        self._leases[scope] = leases
        if holder in leases:
            return Admission.ADMITTED, 0
        if parallelism is not None and len(leases) >= parallelism:
            return Admission.FULL, max(1, min(leases.values()) - now_ms)
        starts = self._starts.get(scope, [])
        if window is not None:
            count, window_ms = window
            starts = [s for s in starts if s > now_ms - window_ms]
            if starts and starts[-1] > now_ms:  # behind a start counted: wait for it
                self._starts[scope] = starts
                return Admission.TOO_SOON, starts[-1] - now_ms
            if len(starts) >= count:
                self._starts[scope] = starts
                return Admission.TOO_SOON, max(1, starts[0] + window_ms - now_ms)
        leases[holder] = now_ms + lease_ms
        if window is not None:  # (as the script: starts are kept only for a rate)
            bisect.insort(starts, now_ms)
            self._starts[scope] = starts
        return Admission.ADMITTED, 0

    async def release(self, scope: FlowScope, holder: str) -> None:
        self._check()
        self._leases.get(scope, {}).pop(holder, None)


class MemoryFlowBoard:
    def __init__(self) -> None:
        self.fail = False
        self._views: dict[tuple[str, FlowScope], tuple[FlowView, int]] = {}  # → (view, until)

    async def publish_flow(self, source: str, views: Sequence[FlowView], now_ms: int,
                           ttl_s: int) -> None:
        if self.fail:
            raise CacheError("memory flow board told to fail")
        for v in views:
            self._views[(source, v.scope)] = (replace(v, source=source), now_ms + ttl_s * 1000)

    async def read_flow(self, now_ms: int) -> list[FlowView]:
        if self.fail:
            raise CacheError("memory flow board told to fail")
        return [v for v, until in self._views.values() if until > now_ms]
