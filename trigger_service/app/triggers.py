"""The trigger use cases: register, get, cancel, list (pause and resume: ``.pausing``; run
now: ``.running``; backfill: ``.backfills``, run as a job by ``.trigger_jobs``). No HTTP
here.

A registration (``TriggerService.register``: every route that creates a trigger makes that
one call) runs these steps, in this order:

1. plan the request, vet its callback and its channels (``accept``; the budgets in 5);
2. the trigger: its id (a keyed one's derived from its key), first fire time, route;
3. its recipient's index entry (``link_recipient``);
4. with a key: the key's earlier answer (``app.idempotency``), a replay, ends it here;
5. admission: the channels' daily budgets left, then a place in the caller's quota;
6. the index entries and then the trigger row (``app.creation``: plain writes; a keyed
   registration's row, at the id derived from its key, is also the key's record);
7. the SQS send of a direct trigger, started in the background (never waited for);
8. with a key: its Redis ``done`` entry; then the answer.

A crash after 6, or a send that fails, leaves a PENDING row that the sweepers' due-scan or
the reconciler enqueues, and that a retry with the same key finds and replays; a crash
before it left nothing (index entries alone point nowhere), and the retry creates it.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from trigger_service.app.backfills import Backfills
from trigger_service.app.background_sends import BackgroundSends
from trigger_service.app.callbacks import vet_callback_host
from trigger_service.app.channel_gate import ChannelGate
from trigger_service.app.cpu_shares import costly
from trigger_service.app.creation import TriggerWriter
from trigger_service.app.debouncing import Debouncing
from trigger_service.app.idempotency import IdempotentRegistration, Registered
from trigger_service.app.pausing import Pausing
from trigger_service.app.quota import QuotaGate
from trigger_service.app.recipient_binding import bind_recipient, link_recipient
from trigger_service.app.registration import (
    Budgets,
    NewTrigger,
    RegisterRequest,
    Registration,
    new_trigger,
    snoozed,
    timed_request,
)
from trigger_service.app.running import Run, Running
from trigger_service.app.settling import POLL_MS, WAIT_MS, settle
from trigger_service.config.callers import Caller
from trigger_service.config.settings import Settings
from trigger_service.core.debounce import Debounce
from trigger_service.core.errors import (
    InvalidRequest,
    NotCancellable,
    NotEditable,
    NotFound,
    QuotaExceeded,
)
from trigger_service.core.model import (
    Route,
    Status,
    Trigger,
    fire_month,
    is_trigger_id,
    route_for,
)
from trigger_service.core.notify.addresses import HostResolver
from trigger_service.core.notify.plan import DeliveryPlan
from trigger_service.core.ports import Clock, Enqueuer, Metrics
from trigger_service.core.ports.debounce import DebounceHeads
from trigger_service.core.ports.idempotency import IdempotencyCache, LegacyIdempotency
from trigger_service.core.ports.limit import SendBudget
from trigger_service.core.ports.recipient import RecipientStore
from trigger_service.core.ports.values import NEWEST, KeyedCreation, ListCursor, ListPage
from trigger_service.core.tags import FilteredCatalog, TriggerFilter
from trigger_service.core.time.catchup import CatchUpPolicy
from trigger_service.core.time.timing import DAY_MS
from trigger_service.core.time.zones import TZDATA_VERSION
from trigger_service.core.trace_context import mark

log = structlog.get_logger(__name__)

_MIN_MS = -(2**63)
_FINISHED = {s.value for s in Status if s.terminal}


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
        debounce_heads: DebounceHeads | None = None,
    ) -> None:
        """``resolver``: DNS for the registration half of the SSRF guard (the API passes its
        own); None resolves nothing here, and the dispatcher's check at every connection is
        then the only one. ``budget``: the channels' daily send counts (None: not checked at
        registration; recipients are checked either way). ``recipients``: the profiles a
        trigger may name (None: naming one is ``recipient_not_found``). ``debounce_heads``:
        the heads of debounce keys (None: a request with ``debounce`` is refused)."""
        self._s = settings
        self.recipients = recipients
        self._channels = ChannelGate(budget, clock, metrics)
        self._resolver = resolver
        self._catalog = catalog
        self._clock = clock
        self._metrics = metrics
        self._sends = BackgroundSends(settings.sqs, queue, clock, metrics)
        self._writer = TriggerWriter(catalog, quota, clock, metrics)
        self._keys = IdempotentRegistration(
            catalog, idempotency, cache, clock, metrics, settings.idempotency_retention_s)
        self._pausing = Pausing(settings, catalog, clock, metrics, self.get, self._sends,
                                self._writer.release)
        self._debouncing = None if debounce_heads is None else Debouncing(
            settings, catalog, debounce_heads, self._writer, self._channels, self._sends,
            metrics)
        self._running = Running(settings, catalog, clock, metrics, self.get, self._sends,
                                self._keys, self.register_planned)
        # Backfills are jobs (``app.trigger_jobs``): their runner plans and fires with this.
        self.backfills = Backfills(clock, metrics, self.get, self.register_planned)

    # --- accept: a parsed request becomes a trigger to register ------------------------
    async def accept(self, caller: Caller, req: RegisterRequest, *,
                     budgets: bool = True) -> NewTrigger:
        """Plan ``req`` (its first fire time, its schedule) and vet its callback host; what
        ``edit`` takes (``register`` runs it first), its channels vetted
        (``app.channel_gate``; the daily budgets only if ``budgets``: ``register`` checks them
        itself after its key's replay, so that the replay comes first). Raises
        ``InvalidRequest``, ``FireAtOutOfRange``, ``NonexistentLocalTime``,
        ``CallbackNotAllowed``, ``RecipientNotAllowed`` or ``QuotaExceeded``."""
        bound = await bind_recipient(self.recipients, caller.name, req)
        # A costly caller's plans one at a time, in another process (app/cpu_shares.py).
        new = await costly(timed_request, bound, self._s.api)
        await self.vet_callback(caller, new.callback_url)
        return replace(new, plan=await self.vet_channels(caller, new.plan, budgets=budgets))

    async def vet_channels(self, caller: Caller, plan: DeliveryPlan | None, *,
                           budgets: bool = True) -> DeliveryPlan | None:
        """``plan`` as it may be stored for ``caller`` (``ChannelGate.vet``)."""
        return await self._channels.vet(caller, plan, budgets=budgets)

    async def vet_callback(self, caller: Caller, url: str) -> None:
        """Refuse a callback whose host name resolves to a forbidden address
        (``app.callbacks``). Raises ``CallbackNotAllowed``."""
        if self._resolver is not None:
            await vet_callback_host(caller, url, self._resolver)

    # --- register ----------------------------------------------------------------------
    async def register(self, caller: Caller, req: RegisterRequest, idem_key: str | None,
                       request_hash: str, *, snoozes: Trigger | None = None,
                       debounce: Debounce | None = None) -> Registration:
        """Register what ``req`` asks for ``caller``, once per ``idem_key``: the module
        docstring's steps (``_register`` from 3 on). ``request_hash``: the hash of the body
        as sent (a keyed retry must send the same). ``snoozes``: the trigger a snooze copies
        (``registration.snoozed``). Returns the outcome and ``req`` as timed (what the
        answer shows). Raises what ``accept`` raises, ``NotEditable`` (``snoozes`` is not
        pending, in flight or fired), ``QuotaExceeded`` (with a key, only when the key has
        no trigger), ``IdempotencyKeyReused``, ``StoreError`` (then nothing was accepted; a
        retry with the key is safe) or ``OutcomeUnknown`` (written or not: a retry with
        the key settles it)."""
        new = await self.accept(caller, req, budgets=False)
        if debounce is not None:
            return Registration(
                await self._debounced(caller, new, debounce, idem_key, request_hash), new)
        trigger = new_trigger(caller.name, new, idem_key, request_hash, self._s)
        if snoozes is not None:
            trigger = snoozed(snoozes, trigger)
        registered = await self._register(trigger, idem_key, Budgets(caller, new.plan))
        return Registration(registered, new)

    async def _debounced(self, caller: Caller, new: NewTrigger, debounce: Debounce,
                         idem_key: str | None, request_hash: str) -> Registered:
        """``register`` with a debounce key (``app.debouncing``). With an Idempotency-Key
        too, the key names this request: a retry is answered from Redis's record of the
        first answer (a replay, ``debounced``); one Redis forgot is debounced again (its
        payload and time once more under ``replace``, nothing under ``keep``)."""
        if new.schedule is not None and new.schedule.recurring:
            raise InvalidRequest("debounce: a one-time trigger only (no rrule or cron)",
                                 field="debounce")
        if new.recipient is not None:
            raise InvalidRequest("debounce: not with a recipient", field="debounce")
        if self._debouncing is None:
            raise InvalidRequest("debounce: not available on this server", field="debounce")
        if idem_key is not None:
            earlier = await self._keys.answered(caller.name, idem_key, request_hash)
            if earlier is not None:
                return replace(earlier, debounced=True)
        done = await self._debouncing.register(caller.name, new, debounce, request_hash,
                                               Budgets(caller, new.plan))
        if not done.debounced:
            self._metrics.inc("triggers_registered_total")
        if idem_key is not None:
            await self._keys.remember(caller.name, idem_key, request_hash, done)
        return done

    async def register_planned(self, caller: str, new: NewTrigger, idem_key: str | None,
                               request_hash: str, *, snoozed_from: str | None = None
                               ) -> Registered:
        """``register`` from step 2 on for a trigger timed already, admitted by its quota
        place alone (no daily budgets are checked): a dead letter's copy
        (``app.dead_letters``). Raises what ``register`` raises from step 2 on."""
        trigger = new_trigger(caller, new, idem_key, request_hash, self._s,
                              snoozed_from=snoozed_from)
        return await self._register(trigger, idem_key, None)

    async def _register(self, trigger: Trigger, idem_key: str | None,
                        budgets: Budgets | None) -> Registered:
        """Steps 3 to 8 for ``trigger`` (``budgets`` None: none are checked)."""
        mark({"trigger.id": trigger.trigger_id, "trigger.caller": trigger.caller})
        index_ttl_s = self.index_ttl_s(trigger)
        await link_recipient(self.recipients, trigger, index_ttl_s)
        if idem_key is None:
            if budgets is not None:
                await self._channels.check_budgets(budgets.caller, budgets.plan)
            await self._writer.create(trigger, index_ttl_s)  # its quota place, its rows
            if trigger.route is Route.DIRECT:
                self._sends.start(trigger)
            result = Registered(trigger.trigger_id, trigger.fire_at_ms, replayed=False)
        else:
            result = await self._register_keyed(trigger, idem_key, index_ttl_s, budgets)
        if not result.replayed:
            self._metrics.inc("triggers_registered_total")
        return result

    async def _register_keyed(self, trigger: Trigger, idem_key: str, index_ttl_s: int,
                              budgets: Budgets | None) -> Registered:
        """Steps 4 to 8 with a key: the key's decisions (``app.idempotency``) around the
        writes, the key given back (``release``) if anything fails once it was ours."""
        keys = self._keys
        earlier = await keys.claim(trigger, idem_key)
        if earlier is not None:
            return earlier
        try:
            legacy = await keys.legacy_replay(trigger, idem_key)
            if legacy is not None:
                if legacy.lost:  # its first writer died between the record and the row
                    lost = legacy.record.trigger
                    await self._write_keyed(lost, self.index_ttl_s(lost), budgets)
                await keys.remember_legacy(legacy.record)
                return legacy.answer
            try:
                done = await self._write_keyed(trigger, index_ttl_s, budgets)
            except QuotaExceeded as refusal:
                return await keys.refused(trigger, idem_key, refusal)
            return await keys.created(trigger, idem_key, done)
        except BaseException:
            await keys.release(trigger.caller, idem_key)
            raise

    async def _write_keyed(self, t: Trigger, index_ttl_s: int,
                           budgets: Budgets | None) -> KeyedCreation:
        """Steps 5 to 7 for a keyed ``t``: the row written is sent (as written: at another
        request's elected home, with its fire time); another request's is not."""
        if budgets is not None:
            await self._channels.check_budgets(budgets.caller, budgets.plan)
        done = await self._writer.create_keyed(t, index_ttl_s)  # its quota place, its row
        if done.created and done.trigger.route is Route.DIRECT:
            self._sends.start(done.trigger)
        return done

    def index_ttl_s(self, t: Trigger) -> int:
        """Index entries outlive the row's own retention by the whole retry schedule."""
        return self._s.index_ttl_s(t.fire_at_ms, t.created_at_ms)

    async def enqueue(self, t: Trigger) -> None:
        """Start sending a direct trigger to SQS in the background and return at once (a
        dead letter's replay: ``app.background_sends``); ``drain`` waits for the sends."""
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

    async def owner_of(self, trigger_id: str) -> str:
        """The caller whose trigger ``trigger_id`` is, for operators, who act on any caller's
        through that caller's use cases. Raises ``NotFound``."""
        t = await self._catalog.get(trigger_id) if is_trigger_id(trigger_id) else None
        if t is None:
            raise NotFound(f"no trigger {trigger_id}")
        return t.caller

    async def pause(self, caller: str, trigger_id: str) -> Trigger:
        """PENDING → PAUSED, idempotent (``app.pausing``: its errors)."""
        return await self._pausing.pause(caller, trigger_id)

    async def resume(self, caller: str, trigger_id: str,
                     policy: CatchUpPolicy | None) -> Trigger:
        """PAUSED → PENDING by ``policy`` (None: the series'), idempotent (``app.pausing``)."""
        return await self._pausing.resume(caller, trigger_id, policy)

    async def run(self, caller: str, trigger_id: str, idem_key: str | None,
                  request_hash: str) -> Run:
        """Fire the trigger now, once per ``idem_key`` (``app.running``: what runs, its
        errors)."""
        return await self._running.run(caller, trigger_id, idem_key, request_hash)

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
                      flow_control=req.flow_control, priority=req.priority)
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
        if new.status is Status.PENDING and (
                (moved and new.route is Route.DIRECT)
                or (new.priority is not current.priority and self._queued(new, now_ms))):
            # Moved: the old message is dropped as stale. A new priority: the message is
            # sent again to its lane (``core.lanes``); the old copy meets the claim (or the
            # FIRED row) and is dropped.
            self._sends.start(new)
        return new

    def _queued(self, t: Trigger, now_ms: int) -> bool:
        """Whether ``t``'s message may be on SQS already: sent at creation (the direct
        route), or promoted by a sweeper (due within the direct limit)."""
        return Route.DIRECT in (t.route, route_for(t.fire_at_ms, now_ms,
                                                   self._s.direct_max_delay_s))

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
