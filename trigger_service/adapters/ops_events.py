"""``OpsEvents`` as a signed webhook (``TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_URL``): the event's JSON
POSTed with Standard Webhooks headers (``webhook-id`` the event's id, stable across retries so the
receiver dedupes; signed with ``TRIGGER_ENDPOINT_HEALTH_OPS_EVENTS_SECRET`` by the same signer as
every callback). Without a URL the event is only logged. Events are rare (an endpoint disabled or
enabled): one short-lived session a send."""

from __future__ import annotations

import json

import aiohttp
import structlog
from standardwebhooks.webhooks import Webhook

from trigger_service.config.endpoint_health import EndpointHealthSettings
from trigger_service.core.endpoint_health import OpsEvent
from trigger_service.core.notify.signing import webhook_headers
from trigger_service.core.ports import Clock
from trigger_service.core.time.timing import ms_to_datetime

log = structlog.get_logger(__name__)

# Waits between the tries of one send; past them the event is left to the next sender (a
# disabled event: the dispatchers' pass over unnotified records, dispatcher.endpoint_health).
RETRY_WAITS_MS = (1_000, 3_000, 10_000, 30_000)
TIMEOUT_S = 10.0


class WebhookOpsEvents:
    def __init__(self, settings: EndpointHealthSettings, clock: Clock,
                 retry_waits_ms: tuple[int, ...] = RETRY_WAITS_MS) -> None:
        self._url = settings.ops_events_url
        self._signer = Webhook(settings.ops_events_secret) if self._url else None
        self._clock = clock
        self._waits = retry_waits_ms

    async def send(self, event: OpsEvent) -> bool:
        """POST ``event``, retried after each of ``retry_waits_ms``; True on a 2xx."""
        log.warning("ops_event", type=event.type.value, caller=event.caller,
                    origin=event.origin, failures=event.failures, by=event.by)
        if not self._url:
            return True  # nowhere to send: the log line is the event
        for wait_ms in (0, *self._waits):
            await self._clock.sleep_ms(wait_ms)
            if await self._post(event):
                return True
        log.error("ops_event_not_sent", type=event.type.value, caller=event.caller,
                  origin=event.origin)
        return False

    async def _post(self, event: OpsEvent) -> bool:
        assert self._signer is not None
        body = json.dumps(event.body(), separators=(",", ":"))
        headers = {"content-type": "application/json", "User-Agent": "trigger-service-ops/0.1",
                   **webhook_headers([self._signer], event.event_id,
                                     ms_to_datetime(self._clock.now_ms()), body)}
        try:
            async with aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session, \
                    session.post(self._url, data=body.encode(), headers=headers) as resp:
                if 200 <= resp.status < 300:
                    return True
                log.warning("ops_event_refused", status=resp.status, type=event.type.value)
        except (aiohttp.ClientError, TimeoutError) as e:
            # Retried: the receiver may be down for a while, like any webhook's.
            log.warning("ops_event_failed", error=str(e) or type(e).__name__)
        return False
