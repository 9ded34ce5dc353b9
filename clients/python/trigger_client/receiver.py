"""For the service that receives callbacks: verify a signed callback, and process each
occurrence once; verify an event of an event subscription the same way (``verify_event``).

``verify(secrets, headers, body)`` checks the Standard Webhooks signature (``webhook-id``,
``webhook-timestamp``, ``webhook-signature``) over the exact body bytes with any of the
caller's signing secrets (during a rotation, give the new and the old one), refuses a
timestamp further than ``tolerance_s`` from now (a replayed old request), and returns the
parsed :class:`Callback`. Verify before parsing; never re-serialise the body first.

Delivery is at least once: the same occurrence may come again (a retry after a lost answer,
a replay). :class:`Deduplicator` (sync) and :class:`AsyncDeduplicator` remember occurrence ids:
``claim(id)`` is True only the first time; ``release(id)`` when processing failed, so the
next attempt is processed. Backends: an in-memory LRU (one process) or Redis ``SET NX`` with a
TTL (every process of the receiver).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from trigger_client.errors import InvalidSignature, parse_instant

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aioredis

# The standardwebhooks package refuses timestamps more than 5 minutes away itself; a receiver
# may be stricter, not looser.
MAX_TOLERANCE_S = 300
DEFAULT_TTL_S = 7 * 86_400  # longer than the service keeps retrying an occurrence


@dataclass(frozen=True, slots=True)
class Callback:
    """A verified callback: which occurrence, which attempt, its payload and times."""

    trigger_id: str
    occurrence_id: str
    attempt: int
    payload: Any
    fire_at: datetime
    scheduled_at: datetime
    webhook_timestamp: int


@dataclass(frozen=True, slots=True)
class Event:
    """A verified event to the caller (``PUT /v1/event-subscriptions/{name}``): its id
    (``webhook-id``: deduplicate on it, e.g. with a :class:`Deduplicator`), type, when it
    happened and its data (``triggerId``, ``occurrenceId``, ... by type)."""

    event_id: str
    type: str
    at: datetime
    data: dict[str, Any]
    webhook_timestamp: int


def verify(secrets: str | Sequence[str], headers: Mapping[str, str], body: bytes | str, *,
           tolerance_s: int = MAX_TOLERANCE_S,
           now_s: Callable[[], float] = time.time) -> Callback:
    """The callback in ``body`` if one of ``secrets`` signed it within ``tolerance_s`` of
    now; else ``InvalidSignature`` (answer 400/401 and do not process it)."""
    return _parse(*_verified(secrets, headers, body, tolerance_s, now_s))


def verify_event(secrets: str | Sequence[str], headers: Mapping[str, str], body: bytes | str,
                 *, tolerance_s: int = MAX_TOLERANCE_S,
                 now_s: Callable[[], float] = time.time) -> Event:
    """The event in ``body`` if one of ``secrets`` signed it within ``tolerance_s`` of now
    (the caller's signing secrets, as for callbacks); else ``InvalidSignature``."""
    text, lower, timestamp = _verified(secrets, headers, body, tolerance_s, now_s)
    try:
        d = json.loads(text)
        if not isinstance(d["data"], dict):
            raise TypeError("data is not an object")
        return Event(lower["webhook-id"], str(d["type"]), parse_instant(d["at"]), d["data"],
                     timestamp)
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidSignature(f"signed, but not an event body: {e}") from e


def _verified(secrets: str | Sequence[str], headers: Mapping[str, str], body: bytes | str,
              tolerance_s: int, now_s: Callable[[], float]
              ) -> tuple[str, dict[str, str], int]:
    """The body as text, the headers by lower-case name and the timestamp, once a secret's
    signature matched; else ``InvalidSignature``."""
    if not 0 < tolerance_s <= MAX_TOLERANCE_S:
        raise ValueError(f"tolerance_s must be in 1..{MAX_TOLERANCE_S}")
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        timestamp = int(lower.get("webhook-timestamp", ""))
    except ValueError:
        raise InvalidSignature("missing or unreadable webhook-timestamp") from None
    if abs(now_s() - timestamp) > tolerance_s:
        raise InvalidSignature(f"webhook-timestamp {timestamp} is outside the tolerance "
                               f"({tolerance_s} s): an old request replayed, or a bad clock")
    text = body.decode() if isinstance(body, bytes) else body
    for secret in [secrets] if isinstance(secrets, str) else secrets:
        try:
            Webhook(secret).verify(text, dict(lower), json_parse=False)
        except WebhookVerificationError:
            continue
        return text, lower, timestamp
    raise InvalidSignature("no signature matches any of the secrets given")


def _parse(text: str, headers: Mapping[str, str], timestamp: int) -> Callback:
    try:
        d = json.loads(text)
        return Callback(d["triggerId"], d["occurrenceId"],
                        int(headers.get("x-trigger-attempt", "1")), d.get("payload"),
                        parse_instant(d["fireAt"]), parse_instant(d["scheduledAt"]), timestamp)
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidSignature(f"signed, but not a callback body: {e}") from e


@dataclass
class _Lru:
    """Occurrence ids seen in this process, the oldest forgotten past ``max_entries`` or
    after ``ttl_s``."""

    max_entries: int
    ttl_s: float
    clock_s: Callable[[], float] = time.monotonic
    _seen: OrderedDict[str, float] = field(default_factory=OrderedDict)

    def claim(self, key: str) -> bool:
        now = self.clock_s()
        while self._seen and next(iter(self._seen.values())) <= now:
            self._seen.popitem(last=False)  # expired (insertion order = expiry order)
        if key in self._seen:
            return False
        self._seen[key] = now + self.ttl_s
        if len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
        return True

    def release(self, key: str) -> None:
        self._seen.pop(key, None)


class Deduplicator:
    """``claim(occurrence_id)`` is True the first time only. Build with ``in_memory()`` or
    ``redis(client)`` (a ``redis.Redis``)."""

    def __init__(self, claim: Callable[[str], bool], release: Callable[[str], None]) -> None:
        self._claim = claim
        self._release = release

    @classmethod
    def in_memory(cls, *, max_entries: int = 100_000, ttl_s: float = DEFAULT_TTL_S,
                  clock_s: Callable[[], float] = time.monotonic) -> Deduplicator:
        lru = _Lru(max_entries, ttl_s, clock_s)
        return cls(lru.claim, lru.release)

    @classmethod
    def redis(cls, client: redis.Redis, *, ttl_s: int = DEFAULT_TTL_S,
              prefix: str = "trigger-dedup:") -> Deduplicator:
        """``SET prefix+id 1 NX EX ttl_s``: the first of any number of processes wins."""
        def claim(key: str) -> bool:
            return bool(client.set(prefix + key, b"1", nx=True, ex=ttl_s))

        def release(key: str) -> None:
            client.delete(prefix + key)

        return cls(claim, release)

    def claim(self, occurrence_id: str) -> bool:
        """True if this occurrence was not claimed before (process it now)."""
        return self._claim(occurrence_id)

    def release(self, occurrence_id: str) -> None:
        """Forget it: processing failed, so the service's next attempt is processed."""
        self._release(occurrence_id)


class AsyncDeduplicator:
    """As :class:`Deduplicator`, for asyncio receivers: ``in_memory()`` or
    ``redis(client)`` with a ``redis.asyncio.Redis``."""

    def __init__(self, lru: _Lru | None = None, client: aioredis.Redis | None = None,
                 ttl_s: int = DEFAULT_TTL_S, prefix: str = "trigger-dedup:") -> None:
        self._lru = lru
        self._client = client
        self._ttl_s = ttl_s
        self._prefix = prefix

    @classmethod
    def in_memory(cls, *, max_entries: int = 100_000, ttl_s: float = DEFAULT_TTL_S,
                  clock_s: Callable[[], float] = time.monotonic) -> AsyncDeduplicator:
        return cls(lru=_Lru(max_entries, ttl_s, clock_s))

    @classmethod
    def redis(cls, client: aioredis.Redis, *, ttl_s: int = DEFAULT_TTL_S,
              prefix: str = "trigger-dedup:") -> AsyncDeduplicator:
        return cls(client=client, ttl_s=ttl_s, prefix=prefix)

    async def claim(self, occurrence_id: str) -> bool:
        if self._client is None:
            assert self._lru is not None
            return self._lru.claim(occurrence_id)
        return bool(await self._client.set(self._prefix + occurrence_id, b"1", nx=True,
                                           ex=self._ttl_s))

    async def release(self, occurrence_id: str) -> None:
        if self._client is None:
            assert self._lru is not None
            self._lru.release(occurrence_id)
        else:
            await self._client.delete(self._prefix + occurrence_id)
