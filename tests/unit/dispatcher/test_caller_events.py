"""Events to the caller on the in-memory fakes: what the dispatcher's outcomes emit, what a
caller without subscriptions costs, and the sender's sends, retries and failed events."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from dispatcher.caller_events import PER_CALLER, RECEIVE_BATCH, WAITING_PER_CALLER, EventSender
from tests.unit.dispatcher.fakes import CALLER, OTHER_CALLER, START_MS, Env, failed, settle
from trigger_service.adapters.memory.caller_events import MemoryEventQueue, MemorySubscriptions
from trigger_service.config.events import EventSettings
from trigger_service.core.caller_events import (
    CallerEvent,
    EventDelivery,
    EventType,
    Subscription,
)
from trigger_service.core.endpoint_health import OpsEvent, OpsEventType
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports.values import DeliveryResult
from trigger_service.core.time.catchup import CatchUp
from trigger_service.core.time.recurrence import Recurrence, RuleKind, parse_rule
from trigger_service.core.time.zones import load_zone
from trigger_service.platform.caller_events import (
    CALLER_SHARE_DIVISOR,
    AnnouncedOpsEvents,
    CallerEvents,
    SubscriptionBook,
)

URL = "https://orders.internal/events"


@dataclass
class Posts:
    """A stand-in for ``WebhookChannel.post_event``: answers ``results`` in order (then 200)."""

    results: list[DeliveryResult] = field(default_factory=list)
    sent: list[tuple[str, str, str, dict[str, object]]] = field(default_factory=list)

    async def __call__(self, caller: str, url: str, event_id: str, body: str,
                      timeout_s: float) -> DeliveryResult:
        self.sent.append((caller, url, event_id, json.loads(body)))
        return self.results.pop(0) if self.results else DeliveryResult(True, 200, None)


@dataclass
class World:
    env: Env
    subs: MemorySubscriptions
    queue: MemoryEventQueue
    book: SubscriptionBook
    events: CallerEvents
    posts: Posts
    sender: EventSender

    async def subscribe(self, *types: EventType, name: str = "main", url: str = URL,
                        caller: str = CALLER) -> None:
        now = self.env.clock.now_ms()
        await self.subs.put_subscription(
            Subscription(caller, name, url, frozenset(types), now, now), 5)

    def types(self) -> list[str]:
        return [d.event.type.value for d in self.queue.sent]

    async def deliver_now(self, t: Trigger) -> None:
        d = self.env.dispatcher_with(notifiers=self.env.notifiers,
                                     events=self.events)
        await d.handle(await self.env.receive_one(t))
        await settle()


@pytest.fixture
def world(env: Env) -> World:
    subs, queue = MemorySubscriptions(), MemoryEventQueue()
    book = SubscriptionBook(subs, env.clock, refresh_s=10)
    events = CallerEvents(book, queue, env.metrics, max_pending=100)
    posts = Posts()
    sender = EventSender(EventSettings(max_attempts=3, retry_backoff_s=(10, 60)), queue, book,
                         subs, env.callers, posts, env.clock, env.metrics, failed_ttl_s=3600)
    return World(env, subs, queue, book, events, posts, sender)


async def test_a_dead_letter_is_announced_once_each_as_dead_lettered_and_failed(
        world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED, EventType.TRIGGER_FAILED)
    world.env.with_dispatch(max_attempts=1)
    world.env.channel.results = [failed("HTTP 500", 500)]
    t = await world.env.add(0)
    await world.deliver_now(t)
    assert world.env.row(t).status is Status.FAILED
    assert sorted(world.types()) == ["trigger.dead_lettered", "trigger.failed"]
    dead = next(d.event for d in world.queue.sent
                if d.event.type is EventType.TRIGGER_DEAD_LETTERED)
    data = json.loads(dead.data_json)
    assert (data["triggerId"], data["occurrenceId"], data["reason"], data["lastError"],
            data["attempts"]) == (t.trigger_id, t.occurrence_id, "max_attempts",
                                  "HTTP 500", 1)


async def test_a_failed_row_found_again_announces_its_dead_letter_again_with_the_same_id(
        world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED)
    world.env.with_dispatch(max_attempts=1)
    world.env.channel.results = [failed("HTTP 500", 500)]
    t = await world.env.add(0)
    await world.deliver_now(t)
    (first,) = [d.event for d in world.queue.sent]
    # Its message comes back (a crash before the delete): the FAILED row is found again.
    await world.env.enqueue(t)
    d = world.env.dispatcher_with(events=world.events)
    await d.handle(await world.env.receive_one())
    await settle()
    again = [d.event for d in world.queue.sent]
    assert len(again) == 2 and again[1].event_id == first.event_id


async def test_fired_is_opt_in(world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED)
    t = await world.env.add(0)
    await world.deliver_now(t)
    assert world.env.row(t).status is Status.FIRED and world.queue.sent == []
    await world.subscribe(EventType.TRIGGER_FIRED, name="fired")
    world.env.clock.advance_ms(10_000)  # the book's copy is read again
    t2 = await world.env.add(0)
    await world.deliver_now(t2)
    assert [(d.subscription, d.event.type.value) for d in world.queue.sent] == [
        ("fired", "trigger.fired")]
    assert json.loads(world.queue.sent[0].event.data_json)["statusCode"] == 200


async def test_a_caller_without_subscriptions_costs_one_read_per_cache_period(
        world: World) -> None:
    for _ in range(5):
        await world.deliver_now(await world.env.add(0))
    assert world.subs.reads == 1 and world.queue.sent == []
    assert world.events.pending == 0


async def test_a_series_finishing_is_announced(world: World) -> None:
    await world.subscribe(EventType.SERIES_FINISHED)
    first = world.env.clock.now_ms()
    start = datetime.fromtimestamp(first / 1000, UTC).replace(tzinfo=None)
    rec = Recurrence(RuleKind.RRULE, parse_rule(RuleKind.RRULE, "FREQ=HOURLY;COUNT=1",
                                                load_zone("UTC"), start),
                     "UTC", start, catch_up=CatchUp())
    t = await world.env.add(0, schedule=rec)
    await world.deliver_now(t)
    assert world.types() == ["series.finished"]
    data = json.loads(world.queue.sent[0].event.data_json)
    assert (data["triggerId"], data["status"], data["occurrencesFired"]) == (
        t.trigger_id, "fired", 1)


async def test_endpoint_events_reach_the_callers_subscriptions(world: World) -> None:
    await world.subscribe(EventType.ENDPOINT_DISABLED)
    sent: list[OpsEvent] = []

    class Ops:
        async def send(self, event: OpsEvent) -> bool:
            sent.append(event)
            return True

    ops = AnnouncedOpsEvents(Ops(), world.events)
    event = OpsEvent(OpsEventType.DISABLED, CALLER, "https://orders.internal:443", START_MS,
                     START_MS - 1000, 7, "HTTP 500")
    assert await ops.send(event)
    await settle()
    assert sent == [event] and world.types() == ["endpoint.disabled"]
    assert json.loads(world.queue.sent[0].event.data_json)["origin"] == event.origin


def an_event(at_ms: int = START_MS) -> CallerEvent:
    return CallerEvent.of(EventType.TRIGGER_DEAD_LETTERED, CALLER, "trg_x.1", at_ms,
                          {"triggerId": "trg_x", "occurrenceId": "trg_x.1"})


async def test_the_sender_posts_the_event_with_its_stable_id(world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED)
    event = an_event()
    await world.queue.send_event(EventDelivery("main", event))
    assert await world.sender.run_once(wait_s=0) == 1
    (caller, url, event_id, body), = world.posts.sent
    assert (caller, url, event_id) == (CALLER, URL, event.event_id)
    assert body == {"type": "trigger.dead_lettered", "at": "2023-11-14T22:13:20.000Z",
                    "data": {"triggerId": "trg_x", "occurrenceId": "trg_x.1"}}
    assert world.queue.sent == [] and world.queue.deleted == [EventDelivery("main", event)]
    assert event.event_id == an_event(START_MS + 5).event_id  # the time is not in the id


async def test_failed_sends_back_off_then_the_event_is_listed_as_failed(world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED)
    world.posts.results = [DeliveryResult(False, 500, "HTTP 500")] * 3
    await world.queue.send_event(EventDelivery("main", an_event()))
    for _ in range(3):
        await world.sender.run_once(wait_s=0)
    assert [delay for _, delay in world.queue.retries] == [10, 60]
    assert len(world.posts.sent) == 3 and world.queue.sent == []
    (f,) = await world.subs.failed_events(CALLER, "main", 10)
    assert (f.event_id, f.attempts, f.last_error) == (an_event().event_id, 3, "HTTP 500")
    # A failed event is not an event: nothing more was queued.
    assert world.queue.visible == [] and world.events.pending == 0


async def test_a_410_gives_up_at_once(world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED)
    world.posts.results = [DeliveryResult(False, 410, "HTTP 410")]
    await world.queue.send_event(EventDelivery("main", an_event()))
    await world.sender.run_once(wait_s=0)
    assert len(await world.subs.failed_events(CALLER, "main", 10)) == 1


async def test_a_deleted_subscription_drops_what_was_queued_for_it(world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED)
    await world.queue.send_event(EventDelivery("main", an_event()))
    await world.subs.delete_subscription(CALLER, "main")
    world.env.clock.advance_ms(10_000)
    await world.sender.run_once(wait_s=0)
    assert world.posts.sent == [] and world.queue.sent == []


async def test_a_url_no_longer_under_a_prefix_is_given_up_unsent(world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED, url="https://elsewhere.example/x")
    await world.queue.send_event(EventDelivery("main", an_event()))
    await world.sender.run_once(wait_s=0)
    assert world.posts.sent == []
    (f,) = await world.subs.failed_events(CALLER, "main", 10)
    assert f.last_error is not None and f.last_error.startswith("refused")


@dataclass
class HangingPosts(Posts):
    """``Posts`` whose sends to ``hang_caller`` wait for ``release`` (a hanging endpoint)."""

    hang_caller: str = CALLER
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hanging: int = 0

    async def __call__(self, caller: str, url: str, event_id: str, body: str,
                      timeout_s: float) -> DeliveryResult:
        if caller == self.hang_caller:
            self.hanging += 1
            await self.release.wait()
        return await super().__call__(caller, url, event_id, body, timeout_s)


async def test_a_callers_hanging_endpoint_delays_no_other_callers_event(world: World) -> None:
    posts = HangingPosts()
    sender = EventSender(EventSettings(), world.queue, world.book, world.subs,
                         world.env.callers, posts, world.env.clock, world.env.metrics,
                         failed_ttl_s=3600)
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED)
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED, caller=OTHER_CALLER,
                          url="https://billing.internal/events")
    for n in range(3 * RECEIVE_BATCH):  # the hanging caller's events come first
        await world.queue.send_event(EventDelivery("main", CallerEvent.of(
            EventType.TRIGGER_DEAD_LETTERED, CALLER, f"trg_{n}.1", START_MS, {})))
    await world.queue.send_event(EventDelivery("main", CallerEvent.of(
        EventType.TRIGGER_DEAD_LETTERED, OTHER_CALLER, "trg_b.1", START_MS, {})))
    for _ in range(4):
        await sender.receive_once(wait_s=0)
    await settle()
    assert [c for c, *_ in posts.sent] == [OTHER_CALLER]  # sent while the others hang
    assert posts.hanging == PER_CALLER  # the hanging caller holds its share of sends, no more
    deferred = world.env.metrics.snapshot().get("caller_event_busy_deferrals_total", 0)
    assert deferred == 3 * RECEIVE_BATCH - PER_CALLER - WAITING_PER_CALLER
    posts.release.set()
    await sender.drain()
    assert len(posts.sent) == 1 + PER_CALLER + WAITING_PER_CALLER


async def test_one_callers_burst_of_events_leaves_room_for_another_callers(
        world: World) -> None:
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED)
    await world.subscribe(EventType.TRIGGER_DEAD_LETTERED, caller=OTHER_CALLER,
                          url="https://billing.internal/events")
    for caller in (CALLER, OTHER_CALLER):
        await world.book.of(caller)  # both cached: emit decides at once
    gate = asyncio.Event()
    real_send = world.queue.send_event

    async def slow_send(delivery: EventDelivery) -> None:  # SQS slow: events pile up
        await gate.wait()
        await real_send(delivery)

    world.queue.send_event = slow_send  # type: ignore[method-assign]
    share = 100 // CALLER_SHARE_DIVISOR  # the world's max_pending is 100
    for n in range(100):  # one caller's herd dead-lettered at once
        world.events.emit(CallerEvent.of(EventType.TRIGGER_DEAD_LETTERED, CALLER,
                                         f"trg_{n}.1", START_MS, {}))
    world.events.emit(CallerEvent.of(EventType.TRIGGER_DEAD_LETTERED, OTHER_CALLER,
                                     "trg_b.1", START_MS, {}))
    assert world.events.pending == share + 1
    gate.set()
    await world.events.drain()
    callers = [d.event.caller for d in world.queue.sent]
    assert callers.count(CALLER) == share and callers.count(OTHER_CALLER) == 1
    snapshot = world.env.metrics.snapshot()
    dropped = snapshot['caller_events_dropped_total{type="trigger.dead_lettered"}']
    assert dropped == 100 - share
