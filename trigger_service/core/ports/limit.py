"""Per-caller limits (``core.ports`` holds the other boundaries; the same rules apply): a
request-rate token bucket and a quota of pending triggers, shared by every API process.

=====================  ==================================  ====================================
port                   used by                             implementations
=====================  ==================================  ====================================
``RateLimiter``        API (a middleware after auth)       adapters.redis.limits, memory.limits
``PendingQuota``       API (registration, cancel)          adapters.redis.limits, memory.limits
``StreamSlots``        API (inbox streams)                 adapters.redis.limits, memory.limits
``SendBudget``         API (registration), dispatcher      adapters.redis.limits, memory.limits
=====================  ==================================  ====================================

Both raise ``CacheError`` when their store fails; the API then lets the request through
(fails open, counted in ``rate_limit_errors_total``): a limit is a fairness tool, never a
reason to refuse work while Redis is down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from trigger_service.core.time.timing import DAY_MS, ms_to_datetime, seconds_until


@dataclass(frozen=True, slots=True)
class BucketRule:
    """A token bucket: ``burst`` tokens at most, refilled at ``rate_per_s``; one per request."""

    rate_per_s: float
    burst: int


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    retry_after_ms: int = 0  # when refused: how long until one token is there again

    @property
    def retry_after_s(self) -> int:
        """``Retry-After`` in whole seconds, rounded up (at least 1 when refused)."""
        return max(1, math.ceil(self.retry_after_ms / 1000)) if not self.allowed else 0


def take_token(tokens: float, last_ms: int, now_ms: int, rule: BucketRule) -> tuple[
        Decision, float]:
    """The bucket's arithmetic, pure (the Redis script does the same in Lua): refill from
    ``last_ms`` to ``now_ms``, take one token if there is one. Returns the decision and the
    tokens left. A clock that went backwards refills nothing."""
    taken, left = take_tokens(tokens, last_ms, now_ms, rule, 1)
    if taken:
        return Decision(True), left
    return Decision(False, math.ceil((1 - left) * 1000 / rule.rate_per_s)), left


def take_tokens(tokens: float, last_ms: int, now_ms: int, rule: BucketRule,
                count: int) -> tuple[int, float]:
    """``take_token`` for up to ``count`` tokens at once (a batch's items): refill as it
    does, then take as many whole tokens as are there, at most ``count``. Returns how many
    were taken and the tokens left."""
    elapsed_ms = max(0, now_ms - last_ms)
    tokens = min(float(rule.burst), tokens + elapsed_ms * rule.rate_per_s / 1000)
    granted = max(0, min(count, math.floor(tokens)))
    return granted, tokens - granted


class RateLimiter(Protocol):
    async def take(self, key: str, rule: BucketRule) -> Decision:
        """Take one token from ``key``'s bucket (created full). Atomic across processes.
        Raises ``CacheError``."""
        ...

    async def take_up_to(self, key: str, rule: BucketRule, count: int) -> int:
        """Take up to ``count`` tokens from ``key``'s bucket at once (``take_tokens``): how
        many were taken (0 when empty). Atomic across processes. Raises ``CacheError``."""
        ...


class PendingQuota(Protocol):
    """At most ``max_pending`` of a caller's triggers counted at once. A trigger counts from
    its registration until ``until_ms`` (its fire time; a recurring series: until its
    ``until`` or, without one, until it is cancelled) or until it is released."""

    async def reserve(self, caller: str, trigger_id: str, until_ms: int, max_pending: int,
                      now_ms: int) -> bool:
        """Count ``trigger_id`` unless ``max_pending`` are counted already (those whose
        ``until_ms`` has passed are forgotten first). True if counted (or already counted).
        Raises ``CacheError``."""
        ...

    async def release(self, caller: str, trigger_id: str) -> None:
        """Stop counting ``trigger_id`` (cancelled, or its registration failed). Idempotent.
        Raises ``CacheError``."""
        ...


class StreamSlots(Protocol):
    """At most ``cap`` open inbox streams per caller across every API process. A slot counts
    until given back or until its ``until_ms`` (past its stream's end of life, so the slots
    of a process that died free themselves)."""

    async def take(self, caller: str, slot: str, until_ms: int, cap: int,
                   now_ms: int) -> int | None:
        """Hold ``slot`` unless ``cap`` slots are held (those whose ``until_ms`` has passed
        are forgotten first). None when held; when refused, the earliest ``until_ms`` of the
        held ones (by then one is free at the latest). Raises ``CacheError``."""
        ...

    async def give_back(self, caller: str, slot: str) -> None:
        """Free ``slot``. Idempotent. Raises ``CacheError``."""
        ...


def utc_day(now_ms: int) -> str:
    """The UTC day of ``now_ms`` as ``yyyymmdd``: what a daily budget counts by."""
    return ms_to_datetime(now_ms).strftime("%Y%m%d")


def seconds_to_next_day(now_ms: int) -> int:
    """Whole seconds (at least 1) from ``now_ms`` to the next UTC midnight."""
    return seconds_until(now_ms - now_ms % DAY_MS + DAY_MS, now_ms)


class SendBudget(Protocol):
    """Recipients per caller, channel type and UTC day, counted at send time against the
    caller's ``daily_budget`` (an email to 50 addresses counts 50). Shared by every process;
    a day's count is kept two days."""

    async def spent(self, caller: str, channel: str, day: str) -> int:
        """How many recipients ``caller`` has counted on ``channel`` on ``day``. Raises
        ``CacheError``."""
        ...

    async def take(self, caller: str, channel: str, day: str, budget: int,
                   count: int = 1) -> bool:
        """Count ``count`` recipients (one send's) unless that would make more than
        ``budget``; True if counted, all of them (a send is never counted in part). Atomic
        across processes. Raises ``CacheError``."""
        ...
