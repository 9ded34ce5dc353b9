"""``RecipientStore`` (``MemoryRecipients``, ``CassandraRecipients``) against one contract:
profiles round-trip (sealed at rest on Cassandra when payloads are), per caller; the
listing pages in id order across partitions; the person's trigger index; zone changes that
a newer change outlives."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import replace
from datetime import time

import pytest

from tests.contract.conftest import KEYSPACE
from tests.contract.support import unique
from tests.keys import fixture_cipher
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.recipients import CassandraRecipients
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.recipients import MemoryRecipients
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.notify.channels import ChannelType
from trigger_service.core.notify.plan import QuietHours
from trigger_service.core.ports.crypto import is_sealed
from trigger_service.core.ports.recipient import LinkedTrigger, RecipientStore, ZoneChange
from trigger_service.core.recipient_profiles import RecipientProfile


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
    return CassandraRecipients.of(request.getfixturevalue("sealing_cassandra"))


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
    assert await recipients.linked(caller, "ada") == [a, b]
    assert await recipients.linked(caller, "bob") == []
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


@pytest.mark.integration
async def test_a_profile_is_sealed_at_rest(sealing_cassandra: CassandraStore) -> None:
    caller = unique("rs-")
    await CassandraRecipients.of(sealing_cassandra).put_profile(caller, profile("ada"))
    rows = await sealing_cassandra._run("recipient_get", [caller, _part("ada"), "ada"])
    text = rows[0][schema.COL_PROFILE]
    assert is_sealed(text) and "+15551234567" not in text


def _part(rid: str) -> int:
    return zlib.crc32(rid.encode()) % schema.RECIPIENT_PARTS
