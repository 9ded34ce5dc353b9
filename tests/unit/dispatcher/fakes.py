"""Shared builders and fakes for the dispatcher's unit tests.

Time only moves through the :class:`ManualClock`; a scripted :class:`ScriptedChannel` stands
in for the webhook and records every delivery with the clock time it happened at.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dispatcher.breaker import CircuitBreaker
from dispatcher.delivery import Delivery, DispatchDeps
from dispatcher.dispatcher import Dispatcher
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.config.callers import CallerRegistry
from trigger_service.config.settings import Settings
from trigger_service.core.model import Route, Status, Trigger, new_trigger_id
from trigger_service.core.notify.channels import ChannelOutcome, ChannelSpec, OccurrenceNotice
from trigger_service.core.ports.values import DeliveryResult, OutgoingMessage, ReceivedMessage
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

START_MS = 1_700_000_000_000
CALLER = "orders"
OTHER_CALLER = "billing"
ORIGIN = f"https://{CALLER}.internal:443"  # the callback origin of CALLER's triggers (add())
UNKNOWN_CALLER = "ghost"  # not in the callers file (removed since it registered)
# What the dispatcher receives with: the 30 s visibility (10 s callback timeout + 20 s slack),
# which covers the tests' short enqueue lead (3 s, + 1 rounded down) plus the 10 s timeout and
# 5 s to write the outcome (dispatcher.visibility; with the default 15 s lead it is 31 s).
VISIBILITY_S = 30
CLAIM_LEAD_MS = 1_000  # Settings().dispatch.claim_lead_ms
# The tests' enqueue lead (the default is 15 s): small, so that a held message and one put
# back are easy to tell apart in a few seconds of fake time.
ENQUEUE_LEAD_S = 3


def _settings() -> Settings:
    s = Settings()
    return replace(s, sqs=replace(s.sqs, enqueue_lead_s=ENQUEUE_LEAD_S))

OK = DeliveryResult(True, 200, None)


def failed(error: str | None = "HTTP 500", status_code: int | None = 500) -> DeliveryResult:
    return DeliveryResult(False, status_code, error)


async def settle(rounds: int = 40) -> None:
    """Let every runnable task run until it blocks (on the clock, an event or a lock)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def make_callers(orders_max_concurrency: int | None = None) -> CallerRegistry:
    orders: dict[str, object] = {"token_sha256": "a" * 64,
                                 "callback_prefixes": ["https://orders.internal/",
                                                       "https://other.internal:8443/"]}
    if orders_max_concurrency is not None:
        orders["max_concurrency"] = orders_max_concurrency
    billing = {"token_sha256": "b" * 64, "callback_prefixes": ["https://billing.internal/"],
               "max_concurrency": 50}
    return CallerRegistry.from_mapping({"callers": {CALLER: orders, OTHER_CALLER: billing}})


@dataclass(frozen=True, slots=True)
class Call:
    trigger_id: str
    attempt: int
    at_ms: int
    claim_id: str | None


class ScriptedChannel:
    """A ``Channel`` that returns ``results`` in order (then OK) and records each call.

    ``gate`` (when set) makes every delivery wait for the event; ``on_deliver`` runs inside
    each delivery (e.g. to let "another dispatcher" change the row meanwhile).
    """

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self.results: list[DeliveryResult] = []
        self.calls: list[Call] = []
        self.timeouts: list[float | None] = []  # each call's timeout_s
        self.gate: asyncio.Event | None = None
        self.on_deliver: Callable[[Trigger], None] | None = None
        self.active: dict[str, int] = {}
        self.max_active: dict[str, int] = {}

    async def deliver(self, trigger: Trigger, attempt: int,
                      timeout_s: float | None = None) -> DeliveryResult:
        self.timeouts.append(timeout_s)
        self.calls.append(Call(trigger.trigger_id, attempt, self._clock.now_ms(),
                               trigger.claim_id))
        caller = trigger.caller
        self.active[caller] = self.active.get(caller, 0) + 1
        self.max_active[caller] = max(self.max_active.get(caller, 0), self.active[caller])
        try:
            if self.on_deliver is not None:
                self.on_deliver(trigger)
            if self.gate is not None:
                await self.gate.wait()
        finally:
            self.active[caller] -= 1
        return self.results.pop(0) if self.results else OK

    def ids(self) -> list[str]:
        return [c.trigger_id for c in self.calls]


class ScriptedNotifiers:
    """Email/SMS/push/inbox: ``results[channel_type]`` answered in order (then OK); every
    send recorded as (type, occurrence id, at_ms, ack_url)."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self.results: dict[str, list[ChannelOutcome]] = {}
        self.sent: list[tuple[str, str, int, str | None]] = []
        self.on_send: Callable[[str], None] | None = None

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        kind = spec.type.value
        self.sent.append((kind, occ.occurrence_id, self._clock.now_ms(), occ.ack_url))
        if self.on_send is not None:
            self.on_send(kind)
        steps = self.results.get(kind)
        return steps.pop(0) if steps else ChannelOutcome(True, provider_message_id=f"{kind}-1")

    def kinds(self) -> list[str]:
        return [k for k, *_ in self.sent]


class AlwaysLosingStore(MemoryStore):
    """A store whose claim LWT never applies while the row stays PENDING (endless races)."""

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None, patient: bool = False
    ) -> bool:
        self.calls["compare_and_set"] = self.calls.get("compare_and_set", 0) + 1
        return False


@dataclass
class Env:
    """One world: clock, store, queue, metrics, channel, settings and callers."""

    clock: ManualClock = field(default_factory=lambda: ManualClock(START_MS))
    store: MemoryStore = field(default_factory=MemoryStore)
    settings: Settings = field(default_factory=_settings)
    callers: CallerRegistry = field(default_factory=make_callers)
    metrics: InMemoryMetrics = field(default_factory=InMemoryMetrics)
    queue: MemoryQueue = field(init=False)
    channel: ScriptedChannel = field(init=False)
    notifiers: ScriptedNotifiers = field(init=False)

    def __post_init__(self) -> None:
        self.queue = MemoryQueue(self.clock)
        self.channel = ScriptedChannel(self.clock)
        self.notifiers = ScriptedNotifiers(self.clock)
        self._claim_ids = itertools.count(1)

    # --- configuration ---------------------------------------------------------------
    def with_dispatch(self, **changes: Any) -> None:
        self.settings = replace(self.settings, dispatch=replace(self.settings.dispatch, **changes))

    def _new_claim_id(self) -> str:
        return f"claim-{next(self._claim_ids)}"

    def dispatcher(self) -> Dispatcher:
        return Dispatcher(self.settings, self.store, self.queue, self.channel, self.callers,
                          self.clock, self.metrics, new_claim_id=self._new_claim_id,
                          notifiers=self.notifiers)

    def dispatcher_with(self, **kwargs: Any) -> Dispatcher:
        return Dispatcher(self.settings, self.store, self.queue, self.channel, self.callers,
                          self.clock, self.metrics, new_claim_id=self._new_claim_id, **kwargs)

    def delivery(self) -> Delivery:
        deps = DispatchDeps(self.settings, self.store, self.queue, self.clock, self.metrics)
        return Delivery(deps, self.channel, self.callers, claim_ids=self._new_claim_id)

    # --- data ------------------------------------------------------------------------
    async def add(self, fire_in_ms: int, *, caller: str = CALLER, **changes: Any) -> Trigger:
        """Create a PENDING trigger firing ``fire_in_ms`` from now (``changes`` applied)."""
        now = self.clock.now_ms()
        t = Trigger(trigger_id=new_trigger_id(now), caller=caller,
                    callback_url=f"https://{caller}.internal/cb", payload_json="null",
                    fire_at_ms=now + fire_in_ms, created_at_ms=now, shard=0,
                    route=Route.DIRECT)
        await self.store.create(t, 3600)
        if changes:
            self.store.triggers[t.trigger_id] = replace(t, **changes)
        return self.store.triggers[t.trigger_id]

    def row(self, t: Trigger) -> Trigger:
        return self.store.triggers[t.trigger_id]

    def set_row(self, t: Trigger, status: Status, **changes: Any) -> Trigger:
        """Change the stored row behind the dispatcher's back (another process did it)."""
        new = replace(self.row(t), status=status, **changes)
        self.store.triggers[t.trigger_id] = new
        return new

    async def enqueue(self, *triggers: Trigger, copies: int = 1) -> None:
        await self.queue.send_many([OutgoingMessage(t.trigger_id, t.fire_at_ms, 0)
                                    for t in triggers for _ in range(copies)])

    async def receive(self) -> list[ReceivedMessage]:
        return await self.queue.receive(max_messages=10, wait_s=0, visibility_s=VISIBILITY_S)

    async def receive_one(self, t: Trigger | None = None) -> ReceivedMessage:
        """Enqueue ``t`` (if given) and receive exactly one message."""
        if t is not None:
            await self.enqueue(t)
        got = await self.receive()
        assert len(got) == 1, got
        return got[0]

    def count(self, name: str) -> int:
        return self.metrics.snapshot().get(name, 0)

    def fired_count(self) -> int:
        return self.count('deliveries_total{outcome="fired"}')

    def queued(self, t: Trigger) -> list[int]:
        """When each queued copy of ``t`` becomes visible (empty: deleted)."""
        return self.queue.visible_at_ms(t.trigger_id)


def breaker_of(delivery: Delivery, caller: str = CALLER, origin: str = ORIGIN) -> CircuitBreaker:
    """``caller``'s circuit for ``origin`` (made if new; the tests stay under the cap)."""
    b = delivery.breakers.get(caller, origin)
    assert b is not None
    return b
