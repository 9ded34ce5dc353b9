"""The webhook ``Channel``: POST the trigger to its callback URL.

Redirects are not followed (a redirect could leave the caller's allowed prefixes); any
status outside 2xx, a timeout or a connection error is a failed attempt.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from trigger_service.core.model import Trigger
from trigger_service.core.ports import DeliveryResult
from trigger_service.core.timing import format_rfc3339_ms

_MAX_ERROR_LEN = 500


class WebhookChannel:
    def __init__(self, timeout_s: float, *, max_connections: int = 1000) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

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
        }
        try:
            async with self._session.post(
                trigger.callback_url, data=body.encode(), headers=headers,
                allow_redirects=False,
            ) as resp:
                await resp.read()
                if 200 <= resp.status < 300:
                    return DeliveryResult(True, resp.status, None)
                return DeliveryResult(False, resp.status, f"HTTP {resp.status}")
        except TimeoutError:
            return DeliveryResult(False, None, f"timeout after {self._timeout_s:g}s")
        except aiohttp.ClientError as e:
            msg = f"{type(e).__name__}: {e}"
            return DeliveryResult(False, None, msg[:_MAX_ERROR_LEN])
        except (OSError, asyncio.IncompleteReadError) as e:
            return DeliveryResult(False, None, f"{type(e).__name__}: {e}"[:_MAX_ERROR_LEN])
