"""The one place that keeps a received message hidden, shows it again, passes it on or
deletes it: every part of the dispatcher asks this, and this decides the SQS call.

A message is received ``receive_s`` hidden: long enough for one that arrives as early as the
enqueue lead allows (plus the second its delay was rounded down by) to be held, sent with a
whole callback timeout and its outcome written, so an ordinary early message costs no
``ChangeMessageVisibility`` at all. Only a delivery that starts late (a backlog, a busy
bulkhead) extends it (``keep_hidden``).

Deferrals spend no redrive budget: a message received ``REFRESH_AFTER_RECEIVES`` times is
replaced by a fresh copy instead of hidden again, so only a message whose handling keeps
crashing reaches SQS's DLQ.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from trigger_service.config.settings import Settings
from trigger_service.core.errors import AdapterError, MessageNotInFlight
from trigger_service.core.ports import Clock, DeliveryQueue, Metrics
from trigger_service.core.ports.values import OutgoingMessage, ReceivedMessage, VisibilityChange
from trigger_service.core.time.timing import SQS_MAX_DELAY_S, ceil_div, sqs_delay_s

log = structlog.get_logger("dispatcher")

REFRESH_AFTER_RECEIVES = 10
# Time to write an outcome after a send that took the whole callback timeout.
OUTCOME_MARGIN_MS = 5_000


class Visibility:
    def __init__(self, settings: Settings, queue: DeliveryQueue, clock: Clock,
                 metrics: Metrics) -> None:
        d = settings.dispatch
        self._queue = queue
        self._clock = clock
        self._metrics = metrics
        self._deleting: set[asyncio.Future[None]] = set()
        self._lead_s = settings.sqs.enqueue_lead_s
        self._busy_ms = (int(d.callback_timeout_s * 1000)
                         + min(OUTCOME_MARGIN_MS, d.visibility_slack_s * 1000))
        # Held for up to the lead (and the second ``sqs_delay_s`` rounds down), then busy.
        self.receive_s = max(d.visibility_timeout_s,
                             self._lead_s + 1 + ceil_div(self._busy_ms, 1000))

    def hidden_until_ms(self) -> int:
        """Until when a message received now stays hidden."""
        return self._clock.now_ms() + self.receive_s * 1000

    async def keep_hidden(self, m: ReceivedMessage, hidden_until_ms: int,
                          starts_ms: int) -> int:
        """Extend ``m``'s visibility if a delivery starting at ``starts_ms`` could outlast it
        (it would reappear while we still work on it); returns the new hidden-until.

        Done by: the start, plus a whole callback timeout, plus a margin to write the
        outcome. Usually inside the receive visibility: no SQS call at all."""
        busy_until_ms = starts_ms + self._busy_ms
        if busy_until_ms <= hidden_until_ms:
            return hidden_until_ms
        now_ms = self._clock.now_ms()
        visibility_s = ceil_div(busy_until_ms - now_ms, 1000)
        self._metrics.inc("visibility_extensions_total")
        try:
            await self._queue.change_visibility(m.receipt_handle, visibility_s)
        except MessageNotInFlight as e:
            # Shown again already (this process fell behind its extensions, a herd on a
            # busy machine) or received again: it cannot be hidden, and it need not be.
            # The claim's LWT fences the delivery, not the message: whoever gets the copy
            # meets this claim. Giving up here would leave a claimed trigger to the
            # stale-claim takeover, minutes late.
            self._metrics.inc("visibility_lost_total")
            log.info("visibility_lost", trigger_id=m.trigger_id, error=str(e))
            return busy_until_ms  # nothing more to extend for this delivery
        return now_ms + visibility_s * 1000

    async def defer(self, m: ReceivedMessage, delay_s: int) -> None:
        """Show ``m`` again in ``delay_s`` without spending the redrive budget."""
        if self._in_place(m, delay_s):
            # Batched with concurrent deferrals (a herd's put-backs, an open circuit's).
            await self._queue.change_visibility_many(
                [VisibilityChange(m.receipt_handle, delay_s)])
            return
        self._metrics.inc("message_refreshes_total")
        await self._queue.replace(
            m.receipt_handle,
            OutgoingMessage(m.trigger_id, m.fire_at_ms, delay_s, m.home_at_ms, m.shard,
                            m.caller))

    async def defer_until(self, m: ReceivedMessage, at_ms: int) -> None:
        """Show ``m`` again at ``at_ms`` or just after (rounded up: never earlier)."""
        await self.defer(m, self._delay_s(at_ms))

    async def defer_many_until(self, deferrals: list[tuple[ReceivedMessage, int]]) -> None:
        """``defer_until`` for each (message, time) at once: those hidden again go in one
        request (a receive's worth of a herd's excess costs one call, not one each), those
        due a fresh copy are replaced one by one. Raises ``AdapterError`` if any failed
        (the others are done; a failed one only comes back when its receive ends)."""
        changes, fresh = [], []
        for m, at_ms in deferrals:
            delay_s = self._delay_s(at_ms)
            if self._in_place(m, delay_s):
                changes.append(VisibilityChange(m.receipt_handle, delay_s))
            else:
                fresh.append((m, delay_s))
        results = await asyncio.gather(
            *([self._queue.change_visibility_many(changes)] if changes else []),
            *(self.defer(m, delay_s) for m, delay_s in fresh), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    def _delay_s(self, at_ms: int) -> int:
        return max(1, ceil_div(at_ms - self._clock.now_ms(), 1000))

    @staticmethod
    def _in_place(m: ReceivedMessage, delay_s: int) -> bool:
        """Hidden again as it is, rather than replaced by a fresh copy (one received fewer
        than ``REFRESH_AFTER_RECEIVES`` times, or hidden longer than a copy's delay can)."""
        return m.receive_count < REFRESH_AFTER_RECEIVES or delay_s > SQS_MAX_DELAY_S

    async def show_before(self, m: ReceivedMessage, due_ms: int) -> None:
        """Hide ``m`` until the enqueue lead before ``due_ms`` (a retry, a channel due later,
        a message due too far ahead to hold): it comes back in time to be held."""
        await self.defer(m, sqs_delay_s(due_ms, self._clock.now_ms(), self._lead_s))

    async def hand_back(self, m: ReceivedMessage) -> None:
        """Visible again now (a stopping dispatcher lets its held messages go, together)."""
        await self._queue.change_visibility_many([VisibilityChange(m.receipt_handle, 0)])

    async def pass_on(self, m: ReceivedMessage, next_message: OutgoingMessage) -> None:
        """``m`` is done; ``next_message`` (a series' next occurrence) takes its place."""
        await self._queue.replace(m.receipt_handle, next_message)

    async def delete(self, m: ReceivedMessage) -> None:
        await self._queue.delete(m.receipt_handle)

    async def delete_quietly(self, m: ReceivedMessage) -> None:
        """Delete ``m`` when what it stood for is finished, in the background: nothing waits
        for it (the batch it joins waits for company, ``TRIGGER_SQS_DELETE_LINGER_MS``). A
        failed or lost delete only means it comes back, to a finished trigger, and is
        dropped as a duplicate."""
        task = asyncio.ensure_future(self._delete_ignoring_errors(m))
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    async def _delete_ignoring_errors(self, m: ReceivedMessage) -> None:
        with contextlib.suppress(AdapterError):
            await self._queue.delete(m.receipt_handle)

    async def drain(self) -> None:
        """Wait for the deletes still under way."""
        while self._deleting:
            await asyncio.gather(*list(self._deleting), return_exceptions=True)
