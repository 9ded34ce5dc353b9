"""What the HTTP provider adapters (``sms``, ``push``) share: one aiohttp session, a POST
whose transport failures become transient outcomes (aiohttp's errors are translated here and
nowhere else), and ``Retry-After``.

Redirects are not followed: a provider API answers where it was asked.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

from trigger_service.core.notify.channels import ChannelOutcome
from trigger_service.core.ports import Clock
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.time.timing import ms_to_datetime

MAX_ERROR_LEN = 500
_MAX_ANSWER_BYTES = 64 * 1024  # providers' answers are small JSON objects


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """A provider's answer: its status, its JSON object (None when the body is not one), the
    start of its text and ``Retry-After`` in seconds from now."""

    status: int
    body: dict[str, Any] | None
    text: str
    retry_after_s: float | None

    @property
    def transient(self) -> bool:
        """429 and 5xx: the provider may accept the same request later."""
        return transient_status(self.status)


def transient_status(status: int) -> bool:
    """429 and 5xx: the provider may accept the same request later."""
    return status == 429 or status >= 500


def failed_outcome(status: int, detail: str | None, *, transient: bool, provider_code: str,
                   retry_after_s: float | None) -> ChannelOutcome:
    """A provider's error answer as an outcome: ``HTTP {status}: {detail}`` (cut to
    ``MAX_ERROR_LEN``), permanent unless ``transient``, and only a transient one waits
    ``retry_after_s``."""
    error = f"HTTP {status}" + (f": {detail}" if detail else "")
    return ChannelOutcome(False, permanent=not transient, provider_code=provider_code,
                          error=error[:MAX_ERROR_LEN],
                          retry_after_s=retry_after_s if transient else None)


def retry_after_s(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds from ``now``: a number of seconds (RFC 9110 says whole;
    a fraction is taken too, a negative one as 0), or an HTTP date. None when absent or
    unreadable (``nan`` and ``inf`` included). The one parser of every channel's answer."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def clock_now(clock: Clock) -> datetime:
    """The time now by ``clock``, as an aware datetime (a channel built without a clock
    has the system's ``SystemClock``: every now comes from a Clock)."""
    return ms_to_datetime(clock.now_ms())


class ProviderHttp:
    """One provider's HTTP session. ``post`` returns an ``HttpAnswer`` for any status, or a
    transient ``ChannelOutcome`` when no answer came (timeout, refused or lost connection)."""

    def __init__(self, timeout_s: float, *, clock: Clock | None = None,
                 max_connections: int = 100) -> None:
        self._timeout_s = timeout_s
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, ttl_dns_cache=60),
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                headers={"User-Agent": "trigger-service-dispatcher/0.1"})

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, *, headers: Mapping[str, str], data: Any = None,
                   json_body: Any = None) -> HttpAnswer | ChannelOutcome:
        assert self._session is not None, "open() first"
        try:
            async with self._session.post(url, headers=headers, data=data, json=json_body,
                                          allow_redirects=False) as resp:
                raw = await resp.content.read(_MAX_ANSWER_BYTES)
                retry_after = (retry_after_s(resp.headers.get("Retry-After"),
                                             clock_now(self._clock))
                               if transient_status(resp.status) else None)
                return HttpAnswer(resp.status, _json_object(raw),
                                  raw[:MAX_ERROR_LEN].decode("utf-8", "replace"), retry_after)
        except TimeoutError:
            return ChannelOutcome(False, error=f"timeout after {self._timeout_s:g}s")
        # Each of these means no answer: the provider may or may not have the request, and a
        # retry is the only way to know it was sent (see the Notifier's contract).
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as e:
            return ChannelOutcome(False, error=f"{type(e).__name__}: {e}"[:MAX_ERROR_LEN])


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:  # also UnicodeDecodeError: an HTML error page, a cut-off answer
        return None
    return value if isinstance(value, dict) else None
