"""Encryption at rest on the real Cassandra: what the rows hold (read with the driver, not
the store), that sealed triggers and inbox messages still deliver and read back (rows in
clear too), and ``reencrypt`` moving old rows (in clear, or under an older key) to the
current key, paging through the table."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cassandra.cluster import Session

from tests.contract.support import INDEX_TTL_S, make_trigger
from tests.integration.conftest import KEYSPACE, Stack
from tests.keys import service_settings
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.migrate import migrate
from trigger_service.adapters.cassandra.rows import row_key
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.crypto.envelope import EnvelopeCipher
from trigger_service.adapters.crypto.keyfile import add_key
from trigger_service.adapters.crypto.keyring import file_cipher
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.model import Trigger, new_trigger_id
from trigger_service.core.notify.channels import InboxSpec, OccurrenceNotice
from trigger_service.core.notify.inbox import InboxMessage, message_for
from trigger_service.core.notify.plan import parse_plan
from trigger_service.core.ports.crypto import is_sealed
from trigger_service.core.time.clock import SystemClock

pytestmark = pytest.mark.integration

# The reencrypt test's own keyspace: its pass reads whole tables, which in the shared one
# hold every other test's rows.
RESEAL_KEYSPACE = KEYSPACE + "_reseal"
PLAN = {"channels": [{"type": "email", "to": "ann.secret@example.com", "subject": "s",
                      "text": "t"},
                     {"type": "sms", "to": "+15550100999", "text": "t"},
                     {"type": "push", "token": "push-token-secret", "title": "t", "body": "b"}]}


@pytest.fixture(scope="module")
def raw() -> Iterator[Session]:
    """A driver session of our own: what Cassandra holds, not what the store makes of it."""
    cluster, session = driver.connect(replace(service_settings().cassandra, keyspace=KEYSPACE))
    yield session
    cluster.shutdown()


def raw_row(session: Session, keyspace: str, t: Trigger) -> dict[str, Any]:
    assert t.home_at_ms is not None
    row = session.execute(
        f"SELECT {', '.join(schema.SEALED_COLUMNS)} FROM {keyspace}.{schema.TABLE_BY_SECOND} "
        f"WHERE {schema.COL_HOME_SECOND} = %s AND {schema.COL_ROW_SHARD} = %s "
        f"AND {schema.COL_HOME_AT_MS} = %s AND {schema.COL_TRIGGER_ID} = %s",
        row_key(t.trigger_id, t.shard, t.home_at_ms)).one()
    assert row is not None
    return dict(row)


def raw_secrets(session: Session, keyspace: str, caller: str) -> list[str]:
    return [r[schema.COL_SECRET] for r in session.execute(
        f"SELECT {schema.COL_SECRET} FROM {keyspace}.{schema.TABLE_SECRETS} "
        f"WHERE {schema.COL_CALLER} = %s", (caller,))]


async def test_a_delivered_triggers_payload_is_not_in_clear_in_cassandra(
        stack: Stack, store: CassandraStore, raw: Session) -> None:
    await stack.start_dispatcher()
    marker = "card-" + uuid.uuid4().hex
    _, body, _ = await stack.post(stack.body(delaySeconds=0.5, payload={"card": marker}))
    tid = body["triggerId"]
    rec = stack.receiver
    assert await rec.wait_for(lambda: bool(rec.for_trigger(tid)), 20)
    assert rec.for_trigger(tid)[0].body["payload"] == {"card": marker}
    view = await stack.wait_status(tid, "FIRED")
    assert view["payload"] == {"card": marker}  # read back through the API
    t = await store.get(tid)
    assert t is not None
    stored = raw_row(raw, KEYSPACE, t)[schema.SEALED_COLUMNS[0]]
    assert is_sealed(stored) and marker not in stored


async def test_channel_addresses_are_not_in_clear_and_read_back(
        store: CassandraStore, raw: Session) -> None:
    plan = parse_plan(PLAN)
    t = replace(make_trigger("enc-" + uuid.uuid4().hex[:8], SystemClock().now_ms() + 3_600_000),
                plan=plan).with_home()
    await store.create(t, INDEX_TTL_S)
    row = raw_row(raw, KEYSPACE, t)
    assert all(is_sealed(row[c]) for c in schema.SEALED_COLUMNS)
    for address in ("ann.secret@example.com", "+15550100999", "push-token-secret"):
        assert address not in row["plan"]
    back = await store.get(t.trigger_id)
    assert back is not None and back.plan == plan and back.payload_json == t.payload_json


async def test_signing_secrets_are_sealed_and_a_rotation_in_a_taken_ms_keeps_both(
        store: CassandraStore, raw: Session) -> None:
    caller, now_ms = "enc-" + uuid.uuid4().hex[:8], SystemClock().now_ms()
    first = await store.add_secret(caller, now_ms, "whsec_first")
    second = await store.add_secret(caller, now_ms, "whsec_second")
    assert (first, second) == (now_ms, now_ms + 1)
    assert await store.secrets(caller, 3) == [(now_ms + 1, "whsec_second"), (now_ms, "whsec_first")]
    stored = raw_secrets(raw, KEYSPACE, caller)
    assert len(stored) == 2 and all(is_sealed(v) and "whsec_" not in v for v in stored)


def raw_inbox(session: Session, m: InboxMessage) -> dict[str, Any]:
    row = session.execute(
        f"SELECT {', '.join(schema.INBOX_SEALED_COLUMNS)} FROM {KEYSPACE}.{schema.TABLE_INBOX} "
        f"WHERE {schema.COL_CALLER} = %s AND {schema.COL_RECIPIENT} = %s "
        f"AND {schema.COL_MESSAGE_ID} = %s", (m.caller, m.recipient, m.message_id)).one()
    assert row is not None
    return dict(row)


def inbox_message(caller: str, k: int, secret: str) -> InboxMessage:
    now_ms = SystemClock().now_ms()
    tid = new_trigger_id(now_ms)
    occ = OccurrenceNotice(tid, f"{tid}.{k}", caller, 0, now_ms + k)
    return message_for(InboxSpec("ada", f"Title {secret}", f"Body {secret}",
                                 f'{{"note":"{secret}"}}'), occ, now_ms)


async def test_inbox_title_body_and_data_are_not_in_clear_and_read_back(
        store: CassandraStore, raw: Session) -> None:
    caller, secret = "enc-" + uuid.uuid4().hex[:8], "diagnosis-" + uuid.uuid4().hex
    m = inbox_message(caller, 0, secret)
    assert await store.put_inbox_message(m, 600) == m
    row = raw_inbox(raw, m)
    assert all(is_sealed(row[c]) and secret not in row[c] for c in schema.INBOX_SEALED_COLUMNS)
    assert await store.get_inbox_message(caller, "ada", m.message_id) == m
    assert await store.put_inbox_message(m, 600) == m  # a redelivery: the stored one, opened
    assert await store.inbox_after(caller, "ada", "msg_0", 10) == [m]
    page = await store.list_inbox(caller, "ada", before=None, limit=10, unread_only=False)
    assert page.items == [m]
    read = await store.mark_inbox_read(caller, "ada", m.message_id, m.created_at_ms + 1)
    assert read == replace(m, read_at_ms=m.created_at_ms + 1)
    assert is_sealed(raw_inbox(raw, m)["title"])


async def test_an_inbox_row_written_in_clear_reads_as_it_is(
        store: CassandraStore, raw: Session) -> None:
    old = inbox_message("enc-" + uuid.uuid4().hex[:8], 1, "written-before")
    columns = (schema.COL_CALLER, schema.COL_RECIPIENT, schema.COL_MESSAGE_ID,
               *schema.INBOX_COLUMNS)
    raw.execute(f"INSERT INTO {KEYSPACE}.{schema.TABLE_INBOX} ({', '.join(columns)}) VALUES "
                f"({', '.join('%s' for _ in columns)}) USING TTL 600",
                (old.caller, old.recipient, old.message_id, old.trigger_id, old.occurrence_id,
                 old.title, old.body, old.data_json, old.created_at_ms))
    assert await store.get_inbox_message(old.caller, "ada", old.message_id) == old
    assert await store.inbox_after(old.caller, "ada", "msg_0", 10) == [old]


def key_file(tmp_path: Path, name: str, *ids: str) -> Path:
    """A key file with ``ids``, the first current."""
    path = tmp_path / name
    for key_id in reversed(ids):
        add_key(path, key_id, current=True)
    return path


def reseal_store(cipher: EnvelopeCipher, *, seal_payloads: bool) -> CassandraStore:
    # Two rows a page: the pass must go past the first page to see them all.
    return CassandraStore.open_sync(CassandraSettings(keyspace=RESEAL_KEYSPACE, fetch_size=2),
                                    cipher, seal_payloads=seal_payloads)


async def test_reencrypt_moves_clear_and_old_key_rows_to_the_current_key(tmp_path: Path) -> None:
    settings = replace(service_settings().cassandra, keyspace=RESEAL_KEYSPACE)
    migrate(settings, SystemClock().now_ms())
    cluster, session = driver.connect(settings)
    try:
        for table in (schema.TABLE_BY_SECOND, schema.TABLE_SECRETS):
            session.execute(f"TRUNCATE {RESEAL_KEYSPACE}.{table}")  # earlier runs' keys
        old = key_file(tmp_path, "old", "k-old")
        new = key_file(tmp_path, "new", "k-new")
        new.write_text(new.read_text() + old.read_text())  # k-new wraps, k-old unwraps
        caller = "enc-" + uuid.uuid4().hex[:8]
        fire_ms = SystemClock().now_ms() + 3_600_000
        writers = [reseal_store(file_cipher(old), seal_payloads=sealing)
                   for sealing in (False, True)]
        triggers = [replace(make_trigger(caller, fire_ms), plan=parse_plan(PLAN)).with_home()
                    for _ in range(5)]
        try:
            for i, t in enumerate(triggers):  # in clear and under the old key, by turns
                await writers[i % 2].create(t, INDEX_TTL_S)
            await writers[1].add_secret(caller, 1, "whsec_old_key")
        finally:
            for w in writers:
                w.close_sync()
        session.execute(  # a secret of a release before encryption: in clear
            f"INSERT INTO {RESEAL_KEYSPACE}.{schema.TABLE_SECRETS} ({schema.COL_CALLER}, "
            f"{schema.COL_CREATED_AT_MS}, {schema.COL_SECRET}) VALUES (%s, %s, %s)",
            (caller, 2, "whsec_in_clear"))
        assert not is_sealed(raw_row(session, RESEAL_KEYSPACE, triggers[0])["payload"])

        mover = reseal_store(file_cipher(new), seal_payloads=True)
        try:
            rows, secrets = await mover.reseal_triggers(), await mover.reseal_secrets()
            assert (rows.scanned, rows.resealed, rows.failed) == (5, 10, 0)
            assert (secrets.scanned, secrets.resealed, secrets.failed) == (2, 2, 0)
            again = await mover.reseal_triggers()
            assert again.resealed == 0 and (await mover.reseal_secrets()).resealed == 0
        finally:
            mover.close_sync()

        # Everything is under k-new now: a store that knows k-new alone reads it all.
        only_new = key_file(tmp_path, "only-new", "k-other")
        only_new.write_text(new.read_text().splitlines()[0] + "\n")
        cipher = file_cipher(only_new)
        reader = reseal_store(cipher, seal_payloads=True)
        try:
            for t in triggers:
                row = raw_row(session, RESEAL_KEYSPACE, t)
                assert all(cipher.is_current(row[c]) for c in schema.SEALED_COLUMNS)
                back = await reader.get(t.trigger_id)
                assert back is not None and back.payload_json == t.payload_json
                assert back.plan == t.plan
            assert await reader.secrets(caller, 3) == [(2, "whsec_in_clear"), (1, "whsec_old_key")]
        finally:
            reader.close_sync()
    finally:
        cluster.shutdown()
