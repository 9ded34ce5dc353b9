"""The webhook ``Channel``: POST the trigger to its callback URL.

Redirects are not followed (a redirect could leave the caller's allowed prefixes); any
status outside 2xx, a timeout or a connection error is a failed attempt. A 429 or 503's
``Retry-After`` (seconds or an HTTP date) is reported with the result.

Signatures follow Standard Webhooks (https://www.standardwebhooks.com), made with the
``standardwebhooks`` package: ``webhook-id`` is the occurrence id, ``webhook-timestamp`` the
send time (Unix seconds), ``webhook-signature`` one ``v1,<base64>`` per signing secret of the
caller (the current one first), space-separated, so a receiver holding any of them verifies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import aiohttp
from standardwebhooks.webhooks import Webhook

from trigger_service.core.dead_letters import EXCERPT_MAX_BYTES, excerpt
from trigger_service.core.model import Trigger
from trigger_service.core.ports import Clock, DeliveryResult
from trigger_service.core.timing import format_rfc3339_ms, ms_to_datetime

_MAX_ERROR_LEN = 500

SecretsFor = Callable[[str], Awaitable[Sequence[str]]]


async def no_secrets(caller: str) -> Sequence[str]:
    return ()


class WebhookChannel:
    def __init__(self, timeout_s: float, *, clock: Clock | None = None,
                 secrets_for: SecretsFor = no_secrets, max_connections: int = 1000) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        self._clock = clock
        self._secrets_for = secrets_for
        self._signers: dict[str, Webhook] = {}
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _now(self) -> datetime:
        return ms_to_datetime(self._clock.now_ms()) if self._clock else datetime.now(UTC)

    async def signature_headers(self, trigger: Trigger, body: str) -> dict[str, str]:
        """The Standard Webhooks headers for ``body`` (none if the caller has no secret)."""
        secrets = await self._secrets_for(trigger.caller)
        if not secrets:
            return {}
        now = self._now().replace(microsecond=0)
        sigs = []
        for secret in secrets:
            signer = self._signers.get(secret)
            if signer is None:
                signer = self._signers[secret] = Webhook(secret)
            sigs.append(signer.sign(trigger.occurrence_id, now, body))
        return {"webhook-id": trigger.occurrence_id,
                "webhook-timestamp": str(int(now.timestamp())),
                "webhook-signature": " ".join(sigs)}

    def retry_after_s(self, value: str | None) -> float | None:
        """``Retry-After`` as seconds from now: a number, or an HTTP date."""
        if not value:
            return None
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - self._now()).total_seconds())

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0,
                                         ttl_dns_cache=60)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout,
            headers={"User-Agent": "trigger-service-dispatcher/0.1"})

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def deliver(self, trigger: Trigger, attempt: int) -> DeliveryResult:
        assert self._session is not None, "open() first"
        scheduled = json.dumps(format_rfc3339_ms(trigger.fire_at_ms))
        body = ('{"triggerId":' + json.dumps(trigger.trigger_id)
                + ',"occurrenceId":' + json.dumps(trigger.occurrence_id)
                + ',"payload":' + trigger.payload_json
                + ',"fireAt":' + scheduled + ',"scheduledAt":' + scheduled + "}")
        headers = {
            "Content-Type": "application/json",
            "X-Trigger-Id": trigger.trigger_id,
            "X-Trigger-Occurrence-Id": trigger.occurrence_id,
            "X-Trigger-Attempt": str(attempt),
            **await self.signature_headers(trigger, body),
        }
        try:
            async with self._session.post(
                trigger.callback_url, data=body.encode(), headers=headers,
                allow_redirects=False,
            ) as resp:
                # Only the start of the answer is kept (the attempt history's excerpt).
                text = excerpt(await resp.content.read(EXCERPT_MAX_BYTES))
                if 200 <= resp.status < 300:
                    return DeliveryResult(True, resp.status, None, response_excerpt=text)
                retry_after = (self.retry_after_s(resp.headers.get("Retry-After"))
                               if resp.status in (429, 503) else None)
                return DeliveryResult(False, resp.status, f"HTTP {resp.status}", retry_after,
                                      text)
        except TimeoutError:
            return DeliveryResult(False, None, f"timeout after {self._timeout_s:g}s")
        except aiohttp.ClientError as e:
            msg = f"{type(e).__name__}: {e}"
            return DeliveryResult(False, None, msg[:_MAX_ERROR_LEN])
        except (OSError, asyncio.IncompleteReadError) as e:
            return DeliveryResult(False, None, f"{type(e).__name__}: {e}"[:_MAX_ERROR_LEN])
