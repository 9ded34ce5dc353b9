"""The SQS sends a registration or an edit starts and does not wait for. No HTTP here.

The row is already durable and PENDING when a send starts, so an answer never waits for SQS:
a send that fails (counted in ``enqueue_failures_total`` and logged) or never finishes is
healed by the sweepers' due-scan (the reconciler behind it); only lateness is at stake. Not
waiting lets the queue batch the sends of concurrent registrations
(``TRIGGER_SQS_SEND_LINGER_MS``).
"""

from __future__ import annotations

import asyncio

import structlog

from trigger_service.config.sqs import SqsSettings
from trigger_service.core.model import Trigger
from trigger_service.core.ports import Clock, Enqueuer, Metrics
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.timing import sqs_delay_s

log = structlog.get_logger(__name__)


class BackgroundSends:
    def __init__(self, settings: SqsSettings, queue: Enqueuer, clock: Clock,
                 metrics: Metrics) -> None:
        self._s = settings
        self._queue = queue
        self._clock = clock
        self._metrics = metrics
        self._running: set[asyncio.Future[None]] = set()

    def start(self, t: Trigger) -> None:
        """Start sending a direct trigger to SQS and return at once. With
        ``TRIGGER_SQS_MAX_BACKGROUND_SENDS`` running (SQS hanging) none is started: the
        trigger is left to the due-scan, counted in ``enqueue_overflow_total``."""
        if len(self._running) >= self._s.max_background_sends:
            self._metrics.inc("enqueue_overflow_total")
            log.warning("enqueue_overflow", trigger_id=t.trigger_id, caller=t.caller,
                        pending=len(self._running))
            return
        delay_s = sqs_delay_s(t.fire_at_ms, self._clock.now_ms(), self._s.enqueue_lead_s)
        send = asyncio.ensure_future(self._queue.send(OutgoingMessage.of(t, delay_s)))
        self._running.add(send)
        send.add_done_callback(lambda f: self._sent(f, t))

    def _sent(self, send: asyncio.Future[None], t: Trigger) -> None:
        self._running.discard(send)
        if send.cancelled() or send.exception() is None:
            return
        self._metrics.inc("enqueue_failures_total")
        log.error("enqueue_failed", trigger_id=t.trigger_id, caller=t.caller,
                  error=str(send.exception()))

    async def drain(self) -> None:
        """Wait for the sends started so far (their failures are counted, not raised)."""
        while self._running:
            await asyncio.wait(list(self._running))
