"""``RecipientStore`` (``MemoryRecipients``, ``CassandraRecipients``) against one contract:
profiles round-trip (sealed at rest on Cassandra when payloads are), per caller; the
listing pages in id order across partitions; the person's trigger index, read a page at a
time to its last entry; zone changes that a newer change outlives; and a zone change of a
person with more triggers than one read of the index ever held moves every one."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, time
from typing import Protocol

import pytest

from tests.contract.conftest import KEYSPACE, SMALL_PAGE
from tests.contract.support import unique, utc_ms
from tests.keys import fixture_cipher
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.recipients import CassandraRecipients
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.recipients import MemoryRecipients
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.app.recipient_profiles import RecipientService, RecipientTriggerStore
from trigger_service.config.callers import CallbackPrefix, Caller
from trigger_service.config.settings import Settings
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.model import Route, Trigger, new_trigger_id, shard_of
from trigger_service.core.notify.channels import ChannelType
from trigger_service.core.notify.plan import QuietHours
from trigger_service.core.ports import TriggerCatalog
from trigger_service.core.ports.crypto import is_sealed
from trigger_service.core.ports.recipient import LinkedTrigger, RecipientStore, ZoneChange
from trigger_service.core.recipient_profiles import RecipientProfile
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.time.recurrence import Recurrence, RuleKind
from trigger_service.core.time.zones import TZDATA_VERSION, DstPolicy
from trigger_service.platform.metrics import InMemoryMetrics


def on_store(store: CassandraStore) -> CassandraRecipients:
    """The recipients on ``store``'s statements and sealer (as the wiring builds them)."""
    return CassandraRecipients(store.statements, store.sealer)


@pytest.fixture(scope="module")
def sealing_cassandra(cassandra_store: CassandraStore) -> Iterator[CassandraStore]:
    """A connection to the contract keyspace that seals payloads (and so profiles)."""
    store = CassandraStore.open_sync(CassandraSettings(keyspace=KEYSPACE), fixture_cipher(),
                                     seal_payloads=True)
    yield store
    store.close_sync()


@pytest.fixture(params=[pytest.param("memory"),
                        pytest.param("cassandra", marks=pytest.mark.integration)])
def recipients(request: pytest.FixtureRequest) -> RecipientStore:
    if request.param == "memory":
        return MemoryRecipients()
    return on_store(request.getfixturevalue("sealing_cassandra"))


@pytest.fixture(params=[pytest.param("memory"),
                        pytest.param("cassandra", marks=pytest.mark.integration)])
def small_pages_recipients(request: pytest.FixtureRequest) -> RecipientStore:
    """``recipients`` whose index reads come back in pages of ``SMALL_PAGE`` entries."""
    if request.param == "memory":
        fake = MemoryRecipients()
        fake.page_size = SMALL_PAGE
        return fake
    return on_store(request.getfixturevalue("small_pages_cassandra_store"))


def profile(rid: str, **changes: object) -> RecipientProfile:
    p = RecipientProfile(rid, "America/New_York",
                         QuietHours(time(22, 0), time(7, 0), ""), ("ada@example.com",),
                         "+15551234567", ("tok-1",), None,
                         (ChannelType.PUSH, ChannelType.SMS), "en-US", 1_000)
    return replace(p, **changes)  # type: ignore[arg-type]


async def test_a_profile_round_trips_is_replaced_and_deleted(recipients: RecipientStore
                                                             ) -> None:
    caller = unique("rc-")
    assert await recipients.get_profile(caller, "ada") is None
    await recipients.put_profile(caller, profile("ada"))
    assert await recipients.get_profile(caller, "ada") == profile("ada")
    assert await recipients.get_profile(unique("other-"), "ada") is None  # per caller
    await recipients.put_profile(caller, profile("ada", phone="+4915112345678"))
    got = await recipients.get_profile(caller, "ada")
    assert got is not None and got.phone == "+4915112345678"
    await recipients.delete_profile(caller, "ada")
    await recipients.delete_profile(caller, "ada")  # idempotent
    assert await recipients.get_profile(caller, "ada") is None


async def test_the_listing_pages_in_id_order_and_counts(recipients: RecipientStore) -> None:
    caller = unique("rl-")
    ids = sorted(f"user-{i:02d}" for i in range(23))
    for rid in reversed(ids):
        await recipients.put_profile(caller, profile(rid))
    seen: list[str] = []
    after = ""
    while True:
        page = await recipients.list_profiles(caller, after, 10)
        seen += [p.recipient_id for p in page]
        if len(page) < 10:
            break
        after = page[-1].recipient_id
    assert seen == ids
    assert await recipients.count_profiles(caller) == 23


async def test_the_person_index_and_zone_changes(recipients: RecipientStore) -> None:
    caller = unique("rz-")
    a, b = LinkedTrigger("trg_A", 1_000, 3), LinkedTrigger("trg_B", 2_000, 5)
    await recipients.link(caller, "ada", a, 3600)
    await recipients.link(caller, "ada", b, 3600)
    await recipients.link(caller, "ada", a, 3600)  # idempotent
    assert [page async for page in recipients.linked(caller, "ada")] == [[a, b]]
    assert [page async for page in recipients.linked(caller, "bob")] == []
    first = ZoneChange(caller, "ada", 10)
    await recipients.record_zone_change(first)
    assert first in await recipients.zone_changes(1000)
    newer = ZoneChange(caller, "ada", 20)
    await recipients.record_zone_change(newer)
    await recipients.complete_zone_change(first)  # a newer change was recorded: it stays
    pending = [c for c in await recipients.zone_changes(1000) if c.caller == caller]
    assert pending == [newer]
    await recipients.complete_zone_change(newer)
    assert [c for c in await recipients.zone_changes(1000) if c.caller == caller] == []


async def test_the_person_index_comes_a_page_at_a_time_to_the_last(
        small_pages_recipients: RecipientStore) -> None:
    recipients, caller = small_pages_recipients, unique("rp-")
    entries = [LinkedTrigger(f"trg_{n:02}", 1_000 + n, n % 4) for n in range(10)]
    for e in reversed(entries):
        await recipients.link(caller, "ada", e, 3600)
    pages = [page async for page in recipients.linked(caller, "ada")]
    assert [len(p) for p in pages] == [3, 3, 3, 1]
    assert [e for p in pages for e in p] == entries


@pytest.mark.integration
async def test_a_profile_is_sealed_at_rest(sealing_cassandra: CassandraStore) -> None:
    caller = unique("rs-")
    await on_store(sealing_cassandra).put_profile(caller, profile("ada"))
    rows = await sealing_cassandra.statements.run("recipient_get", [caller, _part("ada"), "ada"])
    text = rows[0][schema.COL_PROFILE]
    assert is_sealed(text) and "+15551234567" not in text


def _part(rid: str) -> int:
    return zlib.crc32(rid.encode()) % schema.RECIPIENT_PARTS


# --- a person with more triggers than one read of the index held -----------------------
BIG = 12_000  # past the 10,000 entries a read of the index once stopped at
SETTINGS = Settings()
NY, TOKYO = "America/New_York", "Asia/Tokyo"
# A daily 09:00 from 2031-01-15 (winter: New York is UTC-5, Tokyo UTC+9, no DST either side).
NINE_NY_MS, NINE_TOKYO_MS = utc_ms(2031, 1, 15, 14), utc_ms(2031, 1, 15, 0)


class PeopleStore(RecipientTriggerStore, TriggerCatalog, Protocol):
    """What the zone change reads and writes, and what creates the triggers."""


@dataclass(frozen=True)
class People:
    """One implementation's trigger store and recipient store."""

    triggers: PeopleStore
    recipients: RecipientStore


@pytest.fixture(params=[pytest.param("memory"),
                        pytest.param("cassandra", marks=pytest.mark.integration)])
def people(request: pytest.FixtureRequest) -> People:
    if request.param == "memory":
        fake = MemoryStore()
        return People(fake, MemoryRecipients())
    real: CassandraStore = request.getfixturevalue("cassandra_store")
    return People(real, on_store(real))


def floating_daily(caller: str, now_ms: int) -> Trigger:
    """A daily 09:00 that floats with the recipient ``ada``'s zone, resolved in New York."""
    tid = new_trigger_id(now_ms)
    rec = Recurrence(RuleKind.RRULE, "FREQ=DAILY", NY, datetime(2031, 1, 15, 9, 0),
                     DstPolicy())
    return Trigger(tid, caller, "https://receiver.example/cb", "{}", NINE_NY_MS, now_ms,
                   shard_of(tid, SETTINGS.shards), Route.SWEEP, schedule=rec,
                   tzdata_version=TZDATA_VERSION, recipient="ada",
                   recipient_zone=True).with_home()


async def test_a_zone_change_moves_every_one_of_12_000_triggers(people: People) -> None:
    caller, clock = unique("rb-"), SystemClock()
    await people.recipients.put_profile(caller, profile("ada"))
    made = [floating_daily(caller, clock.now_ms()) for _ in range(BIG)]
    for i in range(0, BIG, 500):  # rows and index entries straight to the stores
        chunk = made[i:i + 500]
        await asyncio.gather(*(people.triggers.create(t, 600) for t in chunk))
        await asyncio.gather(*(people.recipients.link(
            caller, "ada", LinkedTrigger(t.trigger_id, NINE_NY_MS, t.shard), 600)
            for t in chunk))
    service = RecipientService(SETTINGS, people.recipients, people.triggers,
                               MemoryQueue(clock), clock, InMemoryMetrics())
    who = Caller(caller, ("a" * 64,), (CallbackPrefix.parse("https://receiver.example/"),))
    await service.put(who, "ada", {"timeZone": TOKYO})
    rows = await people.triggers.get_many_at(
        [(t.trigger_id, t.home_at_ms, t.shard) for t in made])
    stayed = [t for t in rows if t is None or t.schedule is None
              or t.schedule.time_zone != TOKYO or t.fire_at_ms != NINE_TOKYO_MS]
    assert len(stayed) == 0, f"{len(stayed)} of {BIG} kept New York"
    assert [c for c in await people.recipients.zone_changes(1000)
            if c.caller == caller] == []  # completed
