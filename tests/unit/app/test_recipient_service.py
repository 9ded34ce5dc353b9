"""Recipient profiles and the triggers that follow them (app/recipient_profiles.py,
app/recipient_binding.py) on the in-memory fakes with a manual clock: the recipient
controls, a zone change that moves each pending occurrence once (and waits for one in
flight), and a deletion that fails the person's reminders with the reason."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from tests.unit.app.support import CALLBACK, NOW_MS, SETTINGS, make_env
from trigger_service.adapters.memory.recipients import MemoryRecipients
from trigger_service.adapters.memory.store import MemoryQueue
from trigger_service.app.recipient_profiles import STEPS_AT_ONCE, RecipientService
from trigger_service.app.registration import RegisterRequest
from trigger_service.config.callers import CallbackPrefix, Caller
from trigger_service.config.recipient_controls import RecipientPolicy
from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.errors import (
    InvalidRequest,
    NotFound,
    RecipientNotAllowed,
    RecipientNotFound,
    StoreError,
)
from trigger_service.core.model import Status, Trigger
from trigger_service.http.parsing import parse_register

CALLER = Caller("shop", ("a" * 64,), (CallbackPrefix.parse("http://127.0.0.1:9000/"),),
                recipients=RecipientPolicy(("example.com",), ("1", "81")))
NY, TOKYO = "America/New_York", "Asia/Tokyo"


class World:
    def __init__(self) -> None:
        self.recipients = MemoryRecipients()
        self.env = make_env()
        self.env.service.recipients = self.recipients  # what the API wires in
        self.queue = MemoryQueue(self.env.clock)
        self.profiles = RecipientService(SETTINGS, self.recipients, self.env.store, self.queue,
                                         self.env.clock, self.env.metrics)

    async def register(self, body: dict[str, object]) -> Trigger:
        req: RegisterRequest = parse_register(
            {"callbackUrl": CALLBACK, **body}, caller=CALLER, now_ms=self.env.clock.now_ms(),
            payload_max_bytes=4096)
        done = await self.env.service.register(CALLER, req, None, "h")
        return await self.env.service.get(CALLER.name, done.registered.trigger_id)

    def row(self, t: Trigger) -> Trigger:
        return self.env.store.triggers[t.trigger_id]


@pytest.fixture
def world() -> World:
    return World()


def wall(at_ms: int, zone: str) -> datetime:
    return datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(ZoneInfo(zone))


async def test_put_get_list_delete_and_the_recipient_controls(world: World) -> None:
    p, created = await world.profiles.put(CALLER, "ada", {"timeZone": NY,
                                                          "email": "ada@example.com"})
    assert created and p.time_zone == NY
    _, created = await world.profiles.put(CALLER, "ada", {"timeZone": NY})
    assert not created  # a replace
    with pytest.raises(RecipientNotAllowed) as refused:
        await world.profiles.put(CALLER, "bob", {"timeZone": NY, "phone": "+4915112345678"})
    assert refused.value.to_json()["field"] == "phone"
    assert [x.recipient_id for x in await world.profiles.list_profiles("shop", "", 10)] == \
        ["ada"]
    assert await world.profiles.delete("shop", "ada") == 0
    with pytest.raises(NotFound):
        await world.profiles.get("shop", "ada")


async def test_a_trigger_naming_an_unknown_recipient_is_refused(world: World) -> None:
    with pytest.raises(RecipientNotFound):
        await world.register({"recipient": "nobody", "delaySeconds": 60})


async def test_when_reads_a_numeric_date_in_the_recipients_locale(world: World) -> None:
    year = datetime.fromtimestamp(NOW_MS / 1000, UTC).year + 1
    await world.profiles.put(CALLER, "us", {"timeZone": "UTC", "locale": "en-US"})
    await world.profiles.put(CALLER, "gb", {"timeZone": "UTC", "locale": "en-GB"})
    await world.profiles.put(CALLER, "any", {"timeZone": "UTC"})
    phrase = f"03/04/{year} 9am"
    us = await world.register({"recipient": "us", "when": phrase, "timeZone": "UTC"})
    gb = await world.register({"recipient": "gb", "when": phrase, "timeZone": "recipient"})
    assert (wall(us.fire_at_ms, "UTC").month, wall(us.fire_at_ms, "UTC").day) == (3, 4)
    assert (wall(gb.fire_at_ms, "UTC").month, wall(gb.fire_at_ms, "UTC").day) == (4, 3)
    with pytest.raises(InvalidRequest):  # no locale: the date stays ambiguous
        await world.register({"recipient": "any", "when": phrase, "timeZone": "UTC"})


async def test_a_floating_daily_reminder_follows_the_zone_once(world: World) -> None:
    await world.profiles.put(CALLER, "ada", {"timeZone": NY})
    floating = await world.register({"recipient": "ada", "timeZone": "recipient",
                                     "localTime": "2023-11-15T09:00", "rrule": "FREQ=DAILY"})
    fixed = await world.register({"recipient": "ada", "timeZone": "Europe/Paris",
                                  "localTime": "2023-11-15T09:00", "rrule": "FREQ=DAILY"})
    assert floating.recipient_zone and floating.schedule is not None
    assert floating.schedule.time_zone == NY
    assert wall(floating.fire_at_ms, NY).hour == 9
    await world.profiles.put(CALLER, "ada", {"timeZone": TOKYO})
    moved = world.row(floating)
    assert moved.schedule is not None and moved.schedule.time_zone == TOKYO
    assert wall(moved.fire_at_ms, TOKYO).replace(tzinfo=None) == datetime(2023, 11, 15, 9, 0)
    assert world.row(fixed) == fixed  # a fixed zone stays
    assert world.recipients.changes == {}  # completed
    revision = moved.revision
    await world.profiles.put(CALLER, "ada", {"timeZone": TOKYO})  # the same zone: nothing
    assert await world.profiles.run_once() == 0 and world.row(floating).revision == revision
    assert world.env.metrics.snapshot()["recipient_rezoned_total"] == 1


async def test_a_wall_time_already_past_in_the_new_zone_takes_the_next(world: World) -> None:
    await world.profiles.put(CALLER, "ada", {"timeZone": "America/Los_Angeles"})
    # Now is 2023-11-14 14:13 in Los Angeles, 07:13 on the 15th in Tokyo; 23:00 daily.
    t = await world.register({"recipient": "ada", "timeZone": "recipient",
                              "localTime": "2023-11-14T23:00", "rrule": "FREQ=DAILY"})
    await world.profiles.put(CALLER, "ada", {"timeZone": TOKYO})
    moved = world.row(t)
    assert moved.fire_at_ms >= NOW_MS
    assert wall(moved.fire_at_ms, TOKYO).replace(tzinfo=None) == datetime(2023, 11, 15, 23, 0)


async def test_a_change_waits_for_an_occurrence_in_flight(world: World) -> None:
    await world.profiles.put(CALLER, "ada", {"timeZone": NY})
    t = await world.register({"recipient": "ada", "timeZone": "recipient",
                              "localTime": "2023-11-15T09:00", "rrule": "FREQ=DAILY"})
    world.env.store.triggers[t.trigger_id] = replace(t, status=Status.IN_FLIGHT,
                                                     claim_id="c1")
    await world.profiles.put(CALLER, "ada", {"timeZone": TOKYO})
    assert len(world.recipients.changes) == 1  # kept: the pass comes back to it
    assert await world.profiles.run_once() == 0
    world.env.store.triggers[t.trigger_id] = replace(world.row(t), status=Status.PENDING,
                                                     claim_id=None)
    assert await world.profiles.run_once() == 1
    moved = world.row(t)
    assert moved.schedule is not None and moved.schedule.time_zone == TOKYO
    assert world.recipients.changes == {}


async def test_deleting_a_recipient_fails_its_reminders_with_the_reason(world: World) -> None:
    await world.profiles.put(CALLER, "ada", {"timeZone": NY})
    one = await world.register({"recipient": "ada", "delaySeconds": 600})
    series = await world.register({"recipient": "ada", "timeZone": "recipient",
                                   "localTime": "2023-11-15T09:00", "rrule": "FREQ=DAILY"})
    assert await world.profiles.delete("shop", "ada") == 2
    for t in (one, series):
        row = world.row(t)
        assert row.status is Status.FAILED
        assert row.last_error == "recipient_deleted: recipient ada was deleted"
        letter = world.env.store.dead_letters[t.occurrence_id]
        assert letter.reason is DeadLetterReason.RECIPIENT_DELETED


async def test_both_passes_read_every_page_of_the_persons_index(world: World) -> None:
    world.recipients.page_size = 2  # five triggers: three pages
    await world.profiles.put(CALLER, "ada", {"timeZone": NY})
    made = [await world.register({"recipient": "ada", "timeZone": "recipient",
                                  "localTime": "2023-11-15T09:00", "rrule": "FREQ=DAILY"})
            for _ in range(5)]
    first = min(made, key=lambda t: t.trigger_id)  # on the first page: in flight
    world.env.store.triggers[first.trigger_id] = replace(first, status=Status.IN_FLIGHT,
                                                         claim_id="c1")
    await world.profiles.put(CALLER, "ada", {"timeZone": TOKYO})
    assert len(world.recipients.changes) == 1  # kept for the one in flight
    zones = {t.trigger_id: s.time_zone for t in made if (s := world.row(t).schedule)}
    assert zones == {t.trigger_id: NY if t is first else TOKYO for t in made}
    assert await world.profiles.delete("shop", "ada") == 4  # the one in flight fails at send
    assert [t for t in made if world.row(t).status is not Status.FAILED] == [first]


async def test_a_failed_move_ends_the_pass_once_its_chunk_settled(world: World) -> None:
    await world.profiles.put(CALLER, "ada", {"timeZone": NY})
    made = [await world.register({"recipient": "ada", "timeZone": "recipient",
                                  "localTime": "2023-11-15T09:00", "rrule": "FREQ=DAILY"})
            for _ in range(STEPS_AT_ONCE + 8)]
    world.env.store.failures["advance"] = StoreError("cassandra advance timed out")
    await world.profiles.put(CALLER, "ada", {"timeZone": TOKYO})
    assert len(world.recipients.changes) == 1  # kept for the next pass
    assert world.env.store.calls["advance"] == STEPS_AT_ONCE  # no second chunk started
    del world.env.store.failures["advance"]
    assert await world.profiles.run_once() == 1
    assert {s.time_zone for t in made if (s := world.row(t).schedule)} == {TOKYO}
