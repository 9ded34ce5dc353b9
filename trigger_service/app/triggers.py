"""The trigger use cases: register, get, cancel, list. No HTTP here.

Durability order for a registration: (1) the index entries and then the trigger row (plain
writes; a keyed registration's row, at the id derived from its key, is also the key's
record: ``app.idempotency``), (2) the SQS send of a direct trigger, started in the
background (the answer never waits for it), (3) the Redis ``done`` entry of a key, (4) the
answer. A crash after (1), or a send that fails, leaves a PENDING row that the sweepers'
due-scan or the reconciler enqueues, and that a retry with the same key finds and replays; a
crash before it left nothing (index entries alone point nowhere), and the retry creates it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import structlog

from trigger_service.app.background_sends import BackgroundSends
from trigger_service.app.callbacks import vet_callback_host
from trigger_service.app.cpu_shares import costly
from trigger_service.app.creation import TriggerWriter
from trigger_service.app.idempotency import IdempotentRegistration, Registered
from trigger_service.app.pausing import Pausing
from trigger_service.app.quota import QuotaGate
from trigger_service.app.recipient_binding import bind_recipient, link_recipient
from trigger_service.app.recipients import ChannelGate
from trigger_service.app.registration import NewTrigger, RegisterRequest, plan_request
from trigger_service.app.settling import POLL_MS, WAIT_MS, settle
from trigger_service.config.callers import Caller
from trigger_service.config.settings import Settings
from trigger_service.core.errors import NotCancellable, NotEditable, NotFound
from trigger_service.core.model import (
    Route,
    Status,
    Trigger,
    fire_month,
    is_trigger_id,
    keyed_trigger_id,
    new_trigger_id,
    route_for,
    shard_of,
)
from trigger_service.core.notify.addresses import HostResolver
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.ports import Clock, Enqueuer, Metrics
from trigger_service.core.ports.idempotency import IdempotencyCache, LegacyIdempotency
from trigger_service.core.ports.limit import SendBudget
from trigger_service.core.ports.recipient import RecipientStore
from trigger_service.core.ports.values import NEWEST, KeyedCreation, ListCursor, ListPage
from trigger_service.core.tags import FilteredCatalog, TriggerFilter
from trigger_service.core.time.catchup import CatchUpPolicy
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.core.time.timing import DAY_MS
from trigger_service.core.time.zones import TZDATA_VERSION
from trigger_service.core.trace_context import current_traceparent, mark

log = structlog.get_logger(__name__)

_MIN_MS = -(2**63)
_FINISHED = {s.value for s in Status if s.terminal}
# A check a registration passes before it counts and writes (never run for a key's replay).
Admit = Callable[[], Awaitable[None]]


class TriggerService:
    def __init__(
        self,
        settings: Settings,
        catalog: FilteredCatalog,
        idempotency: LegacyIdempotency,
        queue: Enqueuer,
        cache: IdempotencyCache,
        clock: Clock,
        metrics: Metrics,
        quota: QuotaGate | None = None,
        *,
        resolver: HostResolver | None = None,
        budget: SendBudget | None = None,
        recipients: RecipientStore | None = None,
    ) -> None:
        """``resolver``: DNS for the registration half of the SSRF guard (the API passes its
        own); None resolves nothing here, and the dispatcher's check at every connection is
        then the only one. ``budget``: the channels' daily send counts (None: not checked at
        registration; recipients are checked either way). ``recipients``: the profiles a
        trigger may name (None: naming one is ``recipient_not_found``)."""
        self._s = settings
        self.recipients = recipients
        self._channels = ChannelGate(budget, clock, metrics)
        self._resolver = resolver
        self._catalog = catalog
        self._clock = clock
        self._metrics = metrics
        self._sends = BackgroundSends(settings.sqs, queue, clock, metrics)
        self._writer = TriggerWriter(catalog, quota, clock, metrics, self.index_ttl_s,
                                     self.enqueue)
        self._idempotent = IdempotentRegistration(
            catalog, idempotency, cache, clock, metrics, settings.idempotency_retention_s)
        self._pausing = Pausing(settings, catalog, clock, metrics, self.get, self.enqueue,
                                self._writer.release)

    # --- accept: a parsed request becomes a trigger to register ------------------------
    async def accept(self, caller: Caller, req: RegisterRequest, *,
                     budgets: bool = True) -> NewTrigger:
        """Plan ``req`` (its first fire time, its schedule) and vet its callback host; what
        ``register``, ``edit`` and ``snooze`` take, its channels vetted (``app.recipients``;
        the daily budgets only if ``budgets``: a registration passes ``budget_check`` to
        ``register`` instead, so that its key's replay comes first). Raises
        ``InvalidRequest``, ``FireAtOutOfRange``, ``NonexistentLocalTime``,
        ``CallbackNotAllowed``, ``RecipientNotAllowed`` or ``QuotaExceeded``."""
        bound = await bind_recipient(self.recipients, caller.name, req)
        # A costly caller's plans one at a time, in another process (app/cpu_shares.py).
        new = await costly(plan_request, bound, self._s.api)
        await self.vet_callback(caller, new.callback_url)
        return replace(new, plan=await self.vet_channels(caller, new.plan, budgets=budgets))

    async def vet_channels(self, caller: Caller, plan: DeliveryPlan | None, *,
                           budgets: bool = True) -> DeliveryPlan | None:
        """``plan`` as it may be stored for ``caller`` (``ChannelGate.vet``)."""
        return await self._channels.vet(caller, plan, budgets=budgets)

    def budget_check(self, caller: Caller, new: NewTrigger) -> Admit:
        """What ``register`` runs before it counts and writes ``new``: its channels' daily
        budgets (``QuotaExceeded``)."""
        return lambda: self._channels.check_budgets(caller, new.plan)

    async def vet_callback(self, caller: Caller, url: str) -> None:
        """Refuse a callback whose host name resolves to a forbidden address
        (``app.callbacks``). Raises ``CallbackNotAllowed``."""
        if self._resolver is not None:
            await vet_callback_host(caller, url, self._resolver)

    # --- register ----------------------------------------------------------------------
    async def register(self, caller: str, req: NewTrigger, idem_key: str | None,
                       request_hash: str, *, snoozed_from: str | None = None,
                       admit: Admit | None = None) -> Registered:
        """Create a PENDING trigger, once per ``idem_key`` (``app.idempotency``): ``admit``
        (e.g. ``budget_check``; a key's replay never runs it), its quota place, its rows, its
        SQS message (``app.creation``). Raises ``QuotaExceeded``, ``IdempotencyKeyReused``,
        ``StoreError`` (then nothing was accepted; a retry with the key is safe) or
        ``OutcomeUnknown`` (written or not: a retry with the key settles it)."""
        trigger = replace(self._new_trigger(caller, req, idem_key, request_hash),
                          snoozed_from=snoozed_from)
        mark({"trigger.id": trigger.trigger_id, "trigger.caller": caller})
        writer = self._writer
        await link_recipient(self.recipients, trigger, self.index_ttl_s(trigger))

        if idem_key is None:
            if admit is not None:
                await admit()
            await writer.create(trigger)
            result = Registered(trigger.trigger_id, trigger.fire_at_ms, replayed=False)
        else:
            async def create_keyed(t: Trigger) -> KeyedCreation:
                if admit is not None:
                    await admit()
                return await writer.create_keyed(t)

            result = await self._idempotent.register(trigger, idem_key, create_keyed)
        if not result.replayed:
            self._metrics.inc("triggers_registered_total")
        return result

    def _new_trigger(self, caller: str, req: NewTrigger, idem_key: str | None,
                     request_hash: str) -> Trigger:
        now_ms = req.received_at_ms
        keyed = idem_key is not None
        # A keyed trigger's id is its key's: every request with the key finds the one row.
        trigger_id = (keyed_trigger_id(caller, idem_key) if idem_key is not None
                      else new_trigger_id(now_ms))
        # The first occurrence's jitter: stored, routed and answered is the jittered instant.
        fire_at_ms = req.fire_at_ms + jitter_offset_ms(f"{trigger_id}.1", req.jitter_s)
        return Trigger(
            trigger_id=trigger_id, caller=caller, callback_url=req.callback_url,
            payload_json=req.payload_json, fire_at_ms=fire_at_ms, created_at_ms=now_ms,
            shard=shard_of(trigger_id, self._s.shards),
            route=route_for(fire_at_ms, now_ms, self._s.direct_max_delay_s),
            idem_key=idem_key, schedule=req.schedule,
            occurrence_index=req.occurrence.index if req.occurrence else 0,
            occurrence_second=req.occurrence.second if req.occurrence else False,
            tzdata_version=TZDATA_VERSION if req.schedule else None, plan=req.plan,
            request_hash=request_hash if keyed else None,
            registered_fire_at_ms=fire_at_ms if keyed else None,
            home_at_ms=fire_at_ms, jitter_s=req.jitter_s, tags=req.tags, labels=req.labels,
            recipient=req.recipient, recipient_zone=req.recipient_zone,
            expires_at_ms=req.expires_at_ms, max_lateness_s=req.max_lateness_s,
            flow_control=req.flow_control, trace_parent=current_traceparent(),
        )

    def index_ttl_s(self, t: Trigger) -> int:
        """Index entries outlive the row's own retention by the whole retry schedule."""
        return self._s.index_ttl_s(t.fire_at_ms, t.created_at_ms)

    async def enqueue(self, t: Trigger) -> None:
        """Start sending a direct trigger to SQS in the background and return at once
        (``app.background_sends``); ``drain`` waits for the sends still running."""
        self._sends.start(t)

    async def drain(self) -> None:
        """Wait for the sends started by registrations and edits that already answered
        (their failures are counted, not raised)."""
        await self._sends.drain()

    # --- read, cancel, list ------------------------------------------------------------
    async def get(self, caller: str, trigger_id: str) -> Trigger:
        """The caller's trigger; another caller's is ``NotFound`` exactly like an unknown id."""
        t = await self._catalog.get(trigger_id) if is_trigger_id(trigger_id) else None
        if t is None or t.caller != caller:
            raise NotFound(f"no trigger {trigger_id}")
        return t

    async def pause(self, caller: str, trigger_id: str) -> Trigger:
        """PENDING → PAUSED, idempotent (``app.pausing``: its errors)."""
        return await self._pausing.pause(caller, trigger_id)

    async def resume(self, caller: str, trigger_id: str,
                     policy: CatchUpPolicy | None) -> Trigger:
        """PAUSED → PENDING by ``policy`` (None: the series'), idempotent (``app.pausing``)."""
        return await self._pausing.resume(caller, trigger_id, policy)

    async def cancel(self, caller: str, trigger_id: str) -> Trigger:
        """PENDING → CANCELLED (idempotent); a 200 is never followed by a delivery.

        The race with a dispatcher is decided by Paxos, not by clocks: the cancel is an LWT
        conditioned on the row being PENDING as read, the claim an LWT conditioned on the
        same, so exactly one of them applies. Once claimed (at most the claim lead before the
        fire time: ``TRIGGER_DISPATCH_CLAIM_LEAD_MS``, more when many are due at once, up to
        ``TRIGGER_DISPATCH_CLAIM_LEAD_MAX_MS``) a one-time trigger is being delivered and cannot be
        cancelled. A series whose occurrence is being delivered is waited for (briefly,
        as an edit is): the series is cancelled after that occurrence finished, so none
        fires after the answer. Raises ``NotCancellable`` for a trigger in flight (a series
        still in flight after the wait) or anything finished. Lazy: the SQS message stays;
        the dispatcher drops it. A cancelled or finished trigger no longer counts against
        the caller's ``max_pending``."""
        try:
            t = await self._cancel(caller, trigger_id)
        except NotCancellable as e:
            if e.extra.get("status") in _FINISHED:
                await self._writer.release(caller, trigger_id)
            raise
        await self._writer.release(caller, trigger_id)
        return t

    async def _cancel(self, caller: str, trigger_id: str) -> Trigger:
        async def apply(t: Trigger) -> Trigger | None:
            new = replace(t, status=Status.CANCELLED, next_attempt_at_ms=None, claim_id=None)
            ttl_s = self._s.terminal_ttl_s(t.registered_fire_at_ms, self._clock.now_ms())
            if not await self._catalog.compare_and_set(t, new, ttl_s=ttl_s):
                return None
            log.info("trigger_cancelled", trigger_id=trigger_id, caller=caller)
            return new

        return await settle(lambda: self.get(caller, trigger_id), self._clock,
                            done=Status.CANCELLED, apply=apply,
                            movable=frozenset({Status.PENDING, Status.PAUSED}),
                            refuse=lambda msg, status: NotCancellable(msg, status=status))

    # --- acknowledge ------------------------------------------------------------------------
    async def ack(self, caller: str | None, trigger_id: str, occurrence_seq: int | None) -> Trigger:
        """Acknowledge the current occurrence (``occurrence_seq`` None) or the one named:
        its escalation steps not yet sent are never sent. Idempotent; an occurrence that
        already finished is acknowledged as it is. ``caller`` None: a signed link (no scope).

        Raced with a step being sent by an LWT like the claim: the ack applies only to a
        PENDING row and bumps the revision, so a dispatcher holding the row as it was before
        cannot claim it; while a step is being sent the ack waits for it (briefly).
        Raises ``NotFound``, ``NotEditable`` (no channels; still in flight)."""
        deadline_ms = self._clock.now_ms() + WAIT_MS
        while True:
            t = (await self.get(caller, trigger_id) if caller is not None
                 else await self._catalog.get(trigger_id))
            if t is None:
                raise NotFound(f"no trigger {trigger_id}")
            if t.plan is None:
                raise NotEditable(f"trigger {trigger_id} has no channels to acknowledge",
                                  status=t.status.value)
            seq = t.occurrence_seq if occurrence_seq is None else occurrence_seq
            if seq != t.occurrence_seq:
                if seq < t.occurrence_seq:
                    return t  # that occurrence finished: nothing left to stop
                raise NotFound(f"no occurrence {trigger_id}.{seq + 1} yet")
            if t.acked or t.status.terminal:
                return t
            if t.status is Status.PENDING:
                new = replace(t, acked_seq=seq, revision=(t.revision or 0) + 1)
                if await self._catalog.compare_and_set(t, new):
                    log.info("occurrence_acknowledged", trigger_id=trigger_id,
                             occurrence_id=t.occurrence_id)
                    return new
            if self._clock.now_ms() >= deadline_ms:
                raise NotEditable(f"trigger {trigger_id}: a step is being sent; retry in a "
                                  "moment", status=t.status.value)
            await self._clock.sleep_ms(POLL_MS)

    # --- edit, snooze --------------------------------------------------------------------
    async def edit(self, current: Trigger, req: NewTrigger, *, retime: bool) -> Trigger:
        """Apply an edit to ``current`` (as read): callback and payload, and with ``retime``
        the schedule and its first occurrence from now; a new ``jitter_s`` alone moves the
        current occurrence within its new window (its scheduled instant stays). The
        occurrence numbering goes on. An occurrence being delivered is waited for (briefly):
        the edit applies to the ones not yet claimed. Raises ``NotEditable`` if ``current``
        finished, stays in flight, or changed meanwhile."""
        deadline_ms = self._clock.now_ms() + WAIT_MS
        while current.status is Status.IN_FLIGHT and self._clock.now_ms() < deadline_ms:
            await self._clock.sleep_ms(POLL_MS)
            current = await self.get(current.caller, current.trigger_id)
        if current.status not in (Status.PENDING, Status.PAUSED):  # PAUSED stays so
            raise NotEditable(
                f"trigger {current.trigger_id} is {current.status.value}" + (
                    "; an occurrence is being delivered, retry in a moment"
                    if current.status is Status.IN_FLIGHT else ""),
                status=current.status.value)
        now_ms = req.received_at_ms
        # Channel states go with the plan: a new plan (or a new time) starts them afresh, an
        # edit of the payload alone keeps what was sent of this occurrence.
        keep = req.plan == current.plan and not retime
        new = replace(current, callback_url=req.callback_url, payload_json=req.payload_json,
                      revision=(current.revision or 0) + 1, plan=req.plan, tags=req.tags,
                      labels=req.labels,
                      channel_states=current.channel_states if keep else (),
                      recipient=req.recipient, recipient_zone=req.recipient_zone,
                      expires_at_ms=req.expires_at_ms, max_lateness_s=req.max_lateness_s,
                      flow_control=req.flow_control)
        await link_recipient(self.recipients, new, self.index_ttl_s(new))
        if retime:  # the new time, jittered as this occurrence is (the window may be new)
            new = replace(
                new, schedule=req.schedule, attempts=0, jitter_s=req.jitter_s,
                last_error=None, next_attempt_at_ms=None,
                occurrence_index=req.occurrence.index if req.occurrence else 0,
                occurrence_second=req.occurrence.second if req.occurrence else False,
                tzdata_version=TZDATA_VERSION if req.schedule else None).jittered(req.fire_at_ms)
        elif req.jitter_s != current.jitter_s:  # the same occurrence in its new window
            new = replace(new, jitter_s=req.jitter_s).jittered(current.scheduled_at_ms)
        moved = retime or new.fire_at_ms != current.fire_at_ms
        if moved:
            new = replace(new, route=route_for(new.fire_at_ms, now_ms, self._s.direct_max_delay_s))
        if not await self._catalog.advance(
                current, new, self._s.index_ttl_s(new.fire_at_ms, now_ms), now_ms):
            raise NotEditable(f"trigger {current.trigger_id} changed meanwhile; read it and "
                              "try again", status=current.status.value)
        log.info("trigger_edited", trigger_id=new.trigger_id, caller=new.caller, retime=retime)
        if moved and new.route is Route.DIRECT and new.status is Status.PENDING:
            await self.enqueue(new)  # the old message is dropped as stale
        return new

    async def snooze(self, original: Trigger, req: NewTrigger, idem_key: str | None,
                     request_hash: str, admit: Admit | None = None) -> Registered:
        """A new one-time trigger with ``original``'s callback and payload at ``req``'s time.
        Raises ``NotEditable`` unless ``original`` is pending, in flight or fired."""
        if original.status not in (Status.PENDING, Status.IN_FLIGHT, Status.FIRED):
            raise NotEditable(f"trigger {original.trigger_id} is {original.status.value}; "
                              "only a pending or fired trigger can be snoozed",
                              status=original.status.value)
        copy = replace(req, callback_url=original.callback_url,
                       payload_json=original.payload_json, plan=original.plan,
                       tags=original.tags, labels=original.labels)
        return await self.register(original.caller, copy, idem_key, request_hash,
                                   snoozed_from=original.trigger_id, admit=admit)

    async def list_triggers(self, caller: str, *, status: Status | None, limit: int,
                            cursor: ListCursor | None, flt: TriggerFilter | None = None
                            ) -> ListPage:
        """The caller's open (PENDING, IN_FLIGHT, PAUSED) triggers by fire time, from the
        oldest still retained; otherwise (all, or a finished status) newest created first.
        With a tag, label or recipient in ``flt``: the matches (of ``status`` too) newest
        first."""
        if flt is not None and flt.driving_term is not None:
            return await self._catalog.list_by_filter(caller, replace(flt, status=status),
                                                      before=cursor or NEWEST, limit=limit)
        now_ms = self._clock.now_ms()
        first = fire_month(now_ms - (self._s.retention_days + 2) * DAY_MS)
        last = fire_month(now_ms + (self._s.api.max_fire_ahead_days + 2) * DAY_MS)
        open_ = status is not None and status.open
        return await self._catalog.list_by_caller(
            caller, start=cursor or ((first, _MIN_MS, "") if open_ else NEWEST),
            last_month=last, limit=limit, status=status)
