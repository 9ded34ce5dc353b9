"""The redrive mirror: what SQS's redrive policy moved out of the main queue becomes visible
in the trigger itself.

Deferrals never use up the redrive budget (the dispatcher refreshes a message it keeps
deferring), so a message reaches the redrive queue only when handling it crashed
``TRIGGER_SQS_MAX_RECEIVE_COUNT`` times: a poison message. Left there it would be a silent
loss: the row stays PENDING or IN_FLIGHT and nothing ever reads the queue. The mirror marks
the trigger FAILED (an LWT from the state it read, so a delivery that finished meanwhile
wins), puts a dead letter with the reason on the DLQ where operators look, and only then
deletes the redriven message: a crash in between repeats the work, never skips it.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import structlog

from trigger_service.config.settings import Settings
from trigger_service.core.dead_letters import letter_for_failed
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import Clock, Metrics, RedriveQueue, TriggerStates
from trigger_service.core.ports.history import DeadLetterIndex
from trigger_service.core.ports.values import ReceivedMessage
from trigger_service.core.time import series
from trigger_service.platform.supervisor import every


class MirrorStore(TriggerStates, DeadLetterIndex, Protocol):
    """The trigger rows and the dead-letter index."""

log = structlog.get_logger("reconciler")

_CAS_ROUNDS = 5
_WAIT_S = 1
_VISIBILITY_S = 60
_IDLE_PAUSE_S = 2.0


class RedriveMirror:
    def __init__(self, settings: Settings, store: MirrorStore, queue: RedriveQueue,
                 clock: Clock, metrics: Metrics) -> None:
        self._s = settings
        self._store = store
        self._queue = queue
        self._clock = clock
        self._metrics = metrics

    async def run_once(self) -> int:
        """Mirror what one receive returns (up to 10 messages); how many were handled."""
        batch = await self._queue.receive_redriven(
            max_messages=10, wait_s=_WAIT_S, visibility_s=_VISIBILITY_S)
        for m in batch:
            await self.mirror(m)
        return len(batch)

    async def run(self, stop: asyncio.Event) -> None:
        """Drain the redrive queue, then look again every couple of seconds until ``stop``."""
        async def step() -> None:
            while not stop.is_set() and await self.run_once():
                pass

        await every(stop, _IDLE_PAUSE_S, step, name="redrive")

    async def mirror(self, m: ReceivedMessage) -> None:
        """FAILED + dead letter for a redriven message's trigger, then delete the message."""
        reason = f"poison message: moved by SQS after {m.receive_count} receives"
        if not m.trigger_id:
            await self._queue.send_dead_letter("", 0, "malformed message body (redriven)")
        else:
            t = await self._mark_failed(m.trigger_id, reason)
            if t is not None and t.status is Status.FAILED:
                # Listed for the API and /ops (unless it is there already, or was replayed
                # or purged), then sent to the DLQ like every dead letter.
                letter = letter_for_failed(t, self._clock.now_ms())
                await self._store.put_dead_letter_if_new(letter, ttl_s=self._s.retention_s)
                await self._queue.send_dead_letter(t.trigger_id, t.fire_at_ms,
                                                   t.last_error or reason)
                self._metrics.inc("dead_lettered_total", reason=letter.reason.value)
        await self._queue.delete_redriven(m.receipt_handle)
        self._metrics.inc("redriven_messages_total")

    async def _mark_failed(self, trigger_id: str, reason: str) -> Trigger | None:
        """The trigger after marking it FAILED; a finished one (FIRED, CANCELLED) is left
        as it is; None if it is gone."""
        for _ in range(_CAS_ROUNDS):
            t = await self._store.get(trigger_id)
            if t is None or t.status.terminal or t.status is Status.PAUSED:
                if t is None:
                    log.warning("redriven_unknown_trigger", trigger_id=trigger_id)
                return t  # (a PAUSED one is left paused: its resume re-sends it)
            # Finished like any failure (the occurrence counted), so the dead letter's id
            # is the occurrence that failed.
            now_ms = self._clock.now_ms()
            new = series.finished(t, fired=False, now_ms=now_ms, error=reason)
            ttl_s = self._s.terminal_ttl_s(t.registered_fire_at_ms, now_ms)
            if await self._store.compare_and_set(t, new, ttl_s=ttl_s):
                log.error("trigger_failed_poison_message", trigger_id=trigger_id,
                          caller=t.caller, reason=reason)
                return new
        log.warning("redrive_mirror_gave_up", trigger_id=trigger_id)
        return await self._store.get(trigger_id)
