"""Debounce on create (``"debounce": {"key", "mode", "maxWaitSeconds"}``). No HTTP here.

While a caller's debounce key has an open trigger (pending or paused, never attempted:
``core.debounce.open_for_debounce``), a request with that key joins it instead of creating
another, and is answered ``debounced`` with its id:

- ``replace`` (trailing debounce) gives it the request's payload and fire time, but never a
  fire time later than the head's ``maxWaitSeconds`` after its first request (the first
  request's bound); the trigger fires once, at the last request's time, with the last
  payload. The change is the LWT an edit makes (``TriggerCatalog.advance``): a claim that
  comes first wins, and the request then starts the next trigger.
- ``keep`` leaves it as it is.

Once the trigger went out (claimed, fired, failed, cancelled, or retrying an attempt) the
next request starts a new head: a new trigger, with its own id and occurrence ids.

Concurrent requests with one key make one trigger: the head is a row changed only by
conditional writes (``DebounceHeads``), the trigger's id is derived from the head
(``DebounceHead.idem_key``), and two first writers of that id make one row
(``TriggerCatalog.create_keyed``), the later joining the earlier. A head whose first writer
died before its row is completed by the next request, with that request's fields.

The trigger created counts against the caller's ``max_pending`` and the channels' budgets
like any registration; a request that joins takes nothing.

The head must outlive its trigger (then the trigger is found finished, or gone, rather than a
second one made), without a head LWT per trailing request: a head with ``maxWaitSeconds`` is
written to live as a trigger firing at its deadline may (no fire time can be later), and is
never renewed; one without is written with ``HEAD_TTL_SLACK_S`` more, and a trailing request
renews it only when its fire time needs longer than the head's ``expires_at_ms``.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from trigger_service.app.background_sends import BackgroundSends
from trigger_service.app.channel_gate import ChannelGate
from trigger_service.app.creation import TriggerWriter
from trigger_service.app.idempotency import Registered
from trigger_service.app.registration import Budgets, NewTrigger, new_trigger
from trigger_service.app.settling import ROUNDS
from trigger_service.config.settings import Settings
from trigger_service.core.debounce import (
    Debounce,
    DebounceHead,
    DebounceMode,
    debounced_fire_at_ms,
    open_for_debounce,
)
from trigger_service.core.errors import NotEditable
from trigger_service.core.model import Route, Status, Trigger, route_for
from trigger_service.core.ports import Metrics, TriggerCatalog
from trigger_service.core.ports.debounce import DebounceHeads

log = structlog.get_logger(__name__)

# A head without maxWait lives this much longer than its trigger needs, so trailing requests
# renew it (an LWT) once per this much the fire times move on, not once each.
HEAD_TTL_SLACK_S = 86_400


class Debouncing:
    def __init__(self, settings: Settings, catalog: TriggerCatalog, heads: DebounceHeads,
                 writer: TriggerWriter, channels: ChannelGate, sends: BackgroundSends,
                 metrics: Metrics) -> None:
        self._s = settings
        self._catalog = catalog
        self._heads = heads
        self._writer = writer
        self._channels = channels
        self._sends = sends
        self._metrics = metrics

    async def register(self, caller: str, new: NewTrigger, debounce: Debounce,
                       request_hash: str, budgets: Budgets) -> Registered:
        """Create the key's trigger, or join the open one (the module docstring). ``new``:
        the request as timed (one-time). Raises what a registration raises
        (``QuotaExceeded``, ``StoreError``, ``OutcomeUnknown``), or ``NotEditable`` when
        the key's trigger keeps changing under this request."""
        now_ms = new.received_at_ms
        head = await self._heads.debounce_head(caller, debounce.key)
        for _ in range(ROUNDS):
            if head is None:
                head = await self._heads.start_head(*self._new_head(
                    caller, debounce, now_ms, new.fire_at_ms))
            capped = replace(new, fire_at_ms=debounced_fire_at_ms(head, new.fire_at_ms))
            t = new_trigger(caller, capped, head.idem_key, request_hash, self._s)
            there = await self._catalog.get(t.trigger_id)
            if there is None and now_ms - head.started_at_ms > self._s.retention_s:
                # Its trigger expired long since: never its id again (its occurrence ids
                # were delivered).
                head = await self._next_head(head, debounce, now_ms, new.fire_at_ms)
                continue
            if there is None:  # the head's first write: ours, or one that has not landed
                await self._channels.check_budgets(budgets.caller, budgets.plan)
                done = await self._writer.create_keyed(t, self.index_ttl_s(t))
                # Concurrent first writers each write the one row, at the home elected with
                # its fire time: the request whose fire time it is came first, the others
                # join it (``app.idempotency``'s rule for a key's concurrent requests).
                if done.created and done.trigger.fire_at_ms == t.fire_at_ms:
                    if t.route is Route.DIRECT:
                        self._sends.start(t)
                    log.info("debounce_started", caller=caller, trigger_id=t.trigger_id)
                    return Registered(t.trigger_id, t.fire_at_ms, replayed=False)
                there = done.trigger  # another request's first write: join it
            if not open_for_debounce(there):
                head = await self._next_head(head, debounce, now_ms, new.fire_at_ms)
                continue
            joined = await self._join(there, head, debounce.mode, capped.payload_json,
                                      capped.fire_at_ms, now_ms)
            if joined is not None:
                self._metrics.inc("triggers_debounced_total", mode=debounce.mode.value)
                return Registered(joined.trigger_id, joined.fire_at_ms, replayed=False,
                                  debounced=True)
            head = await self._heads.debounce_head(caller, debounce.key)  # lost: look again
        raise NotEditable(f"debounce key {debounce.key!r}: its trigger keeps changing; "
                          "retry in a moment", status=Status.PENDING.value)

    async def _join(self, t: Trigger, head: DebounceHead, mode: DebounceMode,
                    payload_json: str, fire_at_ms: int, now_ms: int) -> Trigger | None:
        """``t`` as joined by this request: as it is (``keep``), or with the payload and
        the fire time (``replace``); None when the change lost its LWT."""
        if mode is DebounceMode.KEEP:
            return t
        new = replace(t.jittered(fire_at_ms), payload_json=payload_json,
                      revision=(t.revision or 0) + 1)
        moved = new.fire_at_ms != t.fire_at_ms
        if moved:
            new = replace(new, route=route_for(new.fire_at_ms, now_ms, self._s.direct_max_delay_s))
        if not await self._catalog.advance(t, new, self.index_ttl_s(new), now_ms):
            return None
        if new.fire_at_ms > t.fire_at_ms and self._outlives(new, head, now_ms):
            await self._heads.replace_head(head, *self._renewed(head, new.fire_at_ms, now_ms))
        if moved and new.route is Route.DIRECT and new.status is Status.PENDING:
            self._sends.start(new)  # the old message is dropped as stale
        return new

    async def _next_head(self, head: DebounceHead, debounce: Debounce, now_ms: int,
                         fire_at_ms: int) -> DebounceHead:
        """The head after ``head``: this request's, or another's that came first."""
        return await self._heads.replace_head(
            head, *self._new_head(head.caller, debounce, now_ms, fire_at_ms))

    def index_ttl_s(self, t: Trigger) -> int:
        return self._s.index_ttl_s(t.fire_at_ms, t.created_at_ms)

    def _new_head(self, caller: str, debounce: Debounce, now_ms: int,
                  fire_at_ms: int) -> tuple[DebounceHead, int]:
        """A head started now by a request for ``fire_at_ms``, and its TTL."""
        head = DebounceHead(caller, debounce.key, now_ms, debounce.max_wait_s)
        return self._renewed(head, fire_at_ms, now_ms)

    def _renewed(self, head: DebounceHead, fire_at_ms: int,
                 now_ms: int) -> tuple[DebounceHead, int]:
        """``head`` to be written now for a trigger at ``fire_at_ms``, and its TTL: as long
        as a trigger at its deadline may live (its fire time can be no later), or without
        one as long as a trigger at ``fire_at_ms`` may, and ``HEAD_TTL_SLACK_S`` more."""
        deadline = head.deadline_ms
        if deadline is not None:
            ttl_s = self._s.index_ttl_s(max(deadline, fire_at_ms), now_ms)
        else:
            ttl_s = self._s.index_ttl_s(fire_at_ms, now_ms) + HEAD_TTL_SLACK_S
        return replace(head, expires_at_ms=now_ms + ttl_s * 1000), ttl_s

    def _outlives(self, t: Trigger, head: DebounceHead, now_ms: int) -> bool:
        """Whether ``t``'s row may outlive ``head`` as written (not known: it may)."""
        needed_ms = now_ms + self._s.index_ttl_s(t.fire_at_ms, now_ms) * 1000
        return head.expires_at_ms is None or head.expires_at_ms < needed_ms
