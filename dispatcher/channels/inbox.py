"""The inbox notifier: an occurrence's inbox channel stores one message in the recipient's
inbox (``InboxStore``), then publishes its id to the live streams (``InboxBus``).

``send`` never raises for a delivery failure; it reports a ``ChannelOutcome``:

- stored (now or by an earlier attempt of the same occurrence: the message id is the
  occurrence's, so a redelivery stores nothing new and keeps the read time) → ok, with the
  message id as ``provider_message_id``;
- the store failed → transient (retried on the trigger's backoff), with a generic error
  (``STORE_FAILED``: the driver's text is logged, never shown in ``channels[].lastError``);
- the publish failed after the store → still ok: the message is durable, a stream that
  missed it replays it on reconnect (``Last-Event-ID``) and the listing shows it. Counted as
  ``inbox_publish_failures_total``.
"""

from __future__ import annotations

import structlog

from trigger_service.core.errors import AdapterError
from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    InboxSpec,
    OccurrenceNotice,
)
from trigger_service.core.notify.inbox import message_for
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.inbox import InboxBus, InboxStore

log = structlog.get_logger(__name__)

PUBLISH_FAILURES = "inbox_publish_failures_total"
STORE_FAILED = "the inbox store is unavailable; retrying"


class InboxNotifier:
    def __init__(self, store: InboxStore, bus: InboxBus, clock: Clock, metrics: Metrics,
                 retention_s: int) -> None:
        self._store = store
        self._bus = bus
        self._clock = clock
        self._metrics = metrics
        self._retention_s = retention_s


    async def open(self) -> None:
        """Nothing to open: the store and the bus belong to the process's runtime."""

    async def close(self) -> None:
        """Nothing to close (see ``open``)."""

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        """Store, then publish. Safe to repeat for the same occurrence and channel."""
        if not isinstance(spec, InboxSpec):
            return ChannelOutcome(ok=False, permanent=True, provider_code="wrong_channel",
                                  error=f"the inbox notifier got a {spec.type.value} channel")
        message = message_for(spec, occ, self._clock.now_ms())
        try:
            stored = await self._store.put_inbox_message(message, self._retention_s)
        except AdapterError as e:
            # The driver's text (nodes, addresses) stays in the log: the caller sees this
            # channel's lastError.
            log.warning("inbox_store_failed", message_id=message.message_id, error=str(e))
            return ChannelOutcome(ok=False, error=STORE_FAILED)
        if stored is not None:  # None: the recipient deleted it already; nothing to show
            try:
                # The id only: a stream reads the message from the store, in its own inbox.
                await self._bus.publish(occ.caller, spec.recipient, stored.message_id)
            except AdapterError as e:
                # Durable already: the stream's replay and the listing cover it.
                self._metrics.inc(PUBLISH_FAILURES)
                log.warning("inbox_publish_failed", message_id=message.message_id,
                            error=str(e))
        return ChannelOutcome(ok=True, provider_message_id=message.message_id)
