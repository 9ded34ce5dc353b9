"""Every CQL statement the store prepares, built from the names in ``adapters.schema``, and
the mapping between rows and ``Trigger`` values."""

from __future__ import annotations

import json
from typing import Any

from cassandra.query import UNSET_VALUE

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra.audit import audit_queries
from trigger_service.adapters.cassandra.created_index import created_queries
from trigger_service.adapters.cassandra.dead_letters import dead_letter_queries
from trigger_service.adapters.cassandra.debounce import debounce_queries
from trigger_service.adapters.cassandra.endpoint_health import endpoint_health_queries
from trigger_service.adapters.cassandra.inbox import inbox_queries
from trigger_service.adapters.cassandra.open_index import open_queries
from trigger_service.adapters.cassandra.open_marks import mark_queries
from trigger_service.adapters.cassandra.pauses import pause_queries
from trigger_service.adapters.cassandra.recipients import recipient_queries
from trigger_service.adapters.cassandra.replay_jobs import replay_job_queries
from trigger_service.adapters.cassandra.reseal import reseal_queries
from trigger_service.adapters.cassandra.secrets import secret_queries
from trigger_service.adapters.cassandra.subscriptions import subscription_queries
from trigger_service.adapters.cassandra.term_index import term_queries
from trigger_service.adapters.cassandra.trigger_jobs import trigger_job_queries
from trigger_service.core.flow import flow_from_json, flow_to_json
from trigger_service.core.model import Priority, Route, Status, Trigger
from trigger_service.core.notify.plan import (
    plan_from_json,
    plan_to_json,
    states_from_json,
    states_to_json,
)
from trigger_service.core.time.recurrence import Recurrence


def all_statements(keyspace: str) -> dict[str, str]:
    """Every statement of the store's rooms by name (a name used twice is a bug: one would
    silently run the other's CQL)."""
    merged: dict[str, str] = {}
    for room in (queries, open_queries, mark_queries, created_queries, dead_letter_queries,
                 replay_job_queries, inbox_queries, secret_queries, reseal_queries, term_queries,
                 trigger_job_queries, recipient_queries, pause_queries,
                 endpoint_health_queries, debounce_queries, audit_queries,
                 subscription_queries):
        some = room(keyspace)
        if twice := merged.keys() & some.keys():
            raise AssertionError(f"statement names used twice: {sorted(twice)}")
        merged |= some
    return merged


def queries(keyspace: str) -> dict[str, str]:
    """name → CQL text. Tables are fully qualified: prepared statements under ``USE
    keyspace`` are ambiguous."""
    t, buckets, by_caller, idem, cursors, counters, months, zoned, versions = (
        f"{keyspace}.{name}" for name in (
            s.TABLE_TRIGGERS, s.TABLE_BUCKETS, s.TABLE_BY_CALLER, s.TABLE_IDEMPOTENCY,
            s.TABLE_SWEEP_CURSORS, s.TABLE_COUNTERS, s.TABLE_CALLER_MONTHS, s.TABLE_ZONED,
            s.TABLE_ZONED_VERSIONS))
    return {
        "bucket": f"INSERT INTO {buckets} ({s.COL_BUCKET_MINUTE}, {s.COL_SHARD}, "
        f"{s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_PATH}, {s.COL_HOME_AT_MS}) "
        "VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
        "months": f"SELECT {s.COL_FIRE_MONTH} FROM {months} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_FIRE_MONTH} >= ? AND {s.COL_FIRE_MONTH} <= ?",
        "zoned_put": f"INSERT INTO {zoned} ({s.COL_TZDATA_VERSION}, {s.COL_SHARD}, "
        f"{s.COL_TRIGGER_ID}) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?",
        "zoned_ids": f"SELECT {s.COL_TRIGGER_ID} FROM {zoned} WHERE {s.COL_TZDATA_VERSION} = ? "
        f"AND {s.COL_SHARD} = ?",
        "version_put": f"INSERT INTO {versions} ({s.COL_K}, {s.COL_TZDATA_VERSION}) "
        "VALUES (?, ?) USING TTL ? AND TIMESTAMP ?",
        "versions": f"SELECT {s.COL_TZDATA_VERSION} FROM {versions} WHERE {s.COL_K} = ?",
        # The fire-month listing of earlier releases (the backfill reads it).
        "list": f"SELECT {s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID} FROM {by_caller} "
        f"WHERE {s.COL_CALLER} = ? AND {s.COL_FIRE_MONTH} = ? "
        f"AND ({s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}) > (?, ?) LIMIT ?",
        "ping": "SELECT release_version FROM system.local",
        "bucket_scan": f"SELECT {s.COL_FIRE_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_PATH}, "
        f"{s.COL_HOME_AT_MS} "
        f"FROM {buckets} WHERE {s.COL_BUCKET_MINUTE} = ? AND {s.COL_SHARD} = ? "
        f"AND {s.COL_FIRE_AT_MS} > ? AND {s.COL_FIRE_AT_MS} <= ?",
        "cursor_get": f"SELECT {s.COL_SHARD}, {s.COL_PROMOTED_UNTIL_MS} FROM {cursors} "
        f"WHERE {s.COL_SWEEP_GROUP} = ?",
        "cursor_put": f"INSERT INTO {cursors} ({s.COL_SWEEP_GROUP}, {s.COL_SHARD}, "
        f"{s.COL_PROMOTED_UNTIL_MS}, {s.COL_OWNER}, {s.COL_FENCE}) VALUES (?, ?, ?, ?, ?)",
        "counter_add": f"UPDATE {counters} SET {s.COL_COUNTER_VALUE} = {s.COL_COUNTER_VALUE} + ? "
        f"WHERE {s.COL_COUNTER_NAME} = ?",
        # A small table (one row per counter name): reading it whole is the point.
        "counters_get": f"SELECT {s.COL_COUNTER_NAME}, {s.COL_COUNTER_VALUE} FROM {counters}",
    } | (_trigger_queries(t) | _legacy_idempotency_queries(idem)
         | _row_queries(f"{keyspace}.{s.TABLE_BY_SECOND}"))


def _trigger_queries(t: str) -> dict[str, str]:
    """``triggers``: where a trigger's row is (this release), or the whole row (earlier
    releases: read and moved through the state machine there until they end)."""
    cols = ", ".join(f"{c} = ?" for c in s.TRIGGER_COLUMNS)
    cond = "IF " + " AND ".join(f"{c} = ?" for c in s.TRIGGER_CAS_CONDITION)
    key = f"{s.COL_TRIGGER_ID} = ?"
    return {
        # A trigger of an earlier release: its whole row; of this one: where its row is.
        "get": f"SELECT {', '.join(s.TRIGGER_COLUMNS)}, {s.COL_HOME_AT_MS}, {s.COL_CREATIONS}, "
        f"{s.COL_LIVE_HOME} FROM {t} WHERE {key}",
        # Many rows in one request (one coordinator round trip, not one per row).
        "get_in": f"SELECT {s.COL_TRIGGER_ID}, {', '.join(s.TRIGGER_COLUMNS)}, "
        f"{s.COL_HOME_AT_MS}, {s.COL_CREATIONS}, {s.COL_LIVE_HOME} FROM {t} "
        f"WHERE {s.COL_TRIGGER_ID} IN ?",
        # Where a trigger's row is: written before the row (a pointer to no row reads as no
        # trigger), given the row's TTL once the trigger is finished (with the creations: a
        # keyed trigger's, its home elected; unset for an unkeyed one).
        "home_put": f"UPDATE {t} USING TIMESTAMP ? SET {s.COL_HOME_AT_MS} = ?, "
        f"{s.COL_SHARD} = ? WHERE {key}",
        "home_ttl": f"UPDATE {t} USING TTL ? SET {s.COL_HOME_AT_MS} = ?, {s.COL_SHARD} = ?, "
        f"{s.COL_CREATIONS} = ?, {s.COL_LIVE_HOME} = ? WHERE {key}",
        # A keyed creation's pointer: (its home, its creation time) added to the creations
        # (``adapters.homes``).
        "home_put_keyed": f"UPDATE {t} USING TIMESTAMP ? SET {s.COL_HOME_AT_MS} = ?, "
        f"{s.COL_SHARD} = ?, {s.COL_CREATIONS} = {s.COL_CREATIONS} + ? WHERE {key}",
        # The Paxos election of one home among several, and its repair.
        "home_elect": f"UPDATE {t} SET {s.COL_LIVE_HOME} = ? WHERE {key} "
        f"IF {s.COL_LIVE_HOME} = null",
        "home_reelect": f"UPDATE {t} SET {s.COL_LIVE_HOME} = ? WHERE {key} "
        f"IF {s.COL_LIVE_HOME} = ?",
        "cas": f"UPDATE {t} SET {cols} WHERE {key} {cond}",
        "cas_ttl": f"UPDATE {t} USING TTL ? SET {cols} WHERE {key} {cond}",
        # An earlier release's whole row becomes a pointer to the row just created for it
        # (a series' step: ``CassandraTriggers.advance``), if its state is still the one read.
        "legacy_move": f"UPDATE {t} SET {s.COL_HOME_AT_MS} = ?, "
        + ", ".join(f"{c} = null" for c in s.TRIGGER_COLUMNS if c != s.COL_SHARD)
        + f" WHERE {key} {cond}",
        # How an earlier release created a row (kept for the tests that write one).
        "legacy_create": f"UPDATE {t} USING TIMESTAMP ? SET {cols} WHERE {key}",
    }


def _row_queries(rows: str) -> dict[str, str]:
    """``triggers_by_second``: a trigger's row in the partition of its home second."""
    key = (f"{s.COL_HOME_SECOND} = ? AND {s.COL_ROW_SHARD} = ? AND {s.COL_HOME_AT_MS} = ? "
           f"AND {s.COL_TRIGGER_ID} = ?")
    cols = ", ".join(f"{c} = ?" for c in s.TRIGGER_COLUMNS)
    cond = "IF " + " AND ".join(f"{c} = ?" for c in s.TRIGGER_CAS_CONDITION)
    select = f"{s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, {', '.join(s.TRIGGER_COLUMNS)}"
    return {
        "row_create": f"UPDATE {rows} USING TIMESTAMP ? SET {cols} WHERE {key}",
        # The row an earlier release's series moves into at its next step (``legacy``): by
        # Paxos, so that no plain create (backdated) of the same id can change it.
        "row_create_lwt": f"UPDATE {rows} SET {cols} WHERE {key} "
        f"IF {s.TRIGGER_ABSENT_CONDITION} = null",
        "row_get": f"SELECT {select} FROM {rows} WHERE {key}",
        # A home that must never hold a row (its creation's cells, older, stay invisible):
        # by Paxos, only if no row is there; and a row that lost its id's election.
        "row_seal": f"DELETE FROM {rows} WHERE {key} IF {s.TRIGGER_ABSENT_CONDITION} = null",
        "row_drop": f"DELETE FROM {rows} WHERE {key}",
        # Rows of one partition in one request, by their whole clustering keys: (home, id)
        # pairs, not the product of a list of homes and a list of ids (a herd's rows have as
        # many homes as ids: its product is quadratic).
        "row_get_in": f"SELECT {select} FROM {rows} WHERE {s.COL_HOME_SECOND} = ? "
        f"AND {s.COL_ROW_SHARD} = ? AND ({s.COL_HOME_AT_MS}, {s.COL_TRIGGER_ID}) IN ?",
        # A row created for an earlier release's trigger whose move then lost (nothing
        # points at it, and only its creator could have).
        "row_drop_lwt": f"DELETE FROM {rows} WHERE {key} IF EXISTS",
        "row_cas": f"UPDATE {rows} SET {cols} WHERE {key} {cond}",
        "row_cas_ttl": f"UPDATE {rows} USING TTL ? SET {cols} WHERE {key} {cond}",
    }


def _legacy_idempotency_queries(idem: str) -> dict[str, str]:
    """The ``idempotency`` table of releases before keyed rows (011): read for the keys it holds;
    its writer (an LWT) is kept for the tests that record a key as those releases did."""
    return {
        "idem_get": f"SELECT {s.COL_REQUEST_HASH}, {s.COL_TRIGGER_ID}, {s.COL_REQUEST} "
        f"FROM {idem} WHERE {s.COL_CALLER} = ? AND {s.COL_IDEM_KEY} = ?",
        # Is anything left of the earlier releases' table? One row, once a minute at most.
        "idem_any": f"SELECT {s.COL_CALLER} FROM {idem} LIMIT 1",
        "idem_put": f"INSERT INTO {idem} ({s.COL_CALLER}, {s.COL_IDEM_KEY}, "
        f"{s.COL_REQUEST_HASH}, {s.COL_TRIGGER_ID}, {s.COL_REQUEST}, {s.COL_CREATED_AT_MS}) "
        "VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?",
    }


def row_values(t: Trigger) -> dict[str, Any]:
    """Column → value for every column of ``TRIGGER_COLUMNS``, in that order."""
    return dict(zip(s.TRIGGER_COLUMNS, (
        t.caller, t.callback_url, t.payload_json, t.fire_at_ms, t.created_at_ms, t.shard,
        t.route.value, t.status.value, t.attempts, t.last_error, t.fired_at_ms, t.claim_id,
        t.claimed_at_ms, t.next_attempt_at_ms, t.idem_key,
        json.dumps(t.schedule.to_dict()) if t.schedule else None, t.occurrence_index,
        t.occurrence_second, t.occurrence_seq, t.occurrences_fired, t.tzdata_version,
        t.revision, t.snoozed_from, plan_to_json(t.plan) if t.plan else None,
        states_to_json(t.channel_states) if t.channel_states else None, t.acked_seq,
        t.request_hash, t.registered_fire_at_ms, t.jitter_s or None,  # no jitter: no cell
        json.dumps(list(t.tags)) if t.tags else None,
        json.dumps(dict(t.labels), sort_keys=True) if t.labels else None,
        t.recipient, True if t.recipient_zone else None,
        t.expires_at_ms, t.max_lateness_s,
        flow_to_json(t.flow_control) if t.flow_control else None,
        t.trace_parent, t.claim_lease_ms,
        None if t.priority is Priority.NORMAL else t.priority.value,  # normal: no cell
    ), strict=True))


def changed_values(old: Trigger, new: Trigger, *, rewrite: bool) -> list[Any]:
    """``row_values(new)`` in column order, with ``UNSET_VALUE`` for every column a write
    need not touch, so that a state change rewrites only the few cells it changes (a claim:
    status, claim, attempts), never the definition (payload, rule, channels), and writes no
    null (a null is a cell tombstone).

    ``rewrite``: a write that must rewrite every cell that has a value (a terminal write
    with a TTL: the whole row must expire, and a cell not rewritten keeps no TTL). A column
    that had a value and has none now is written as null (it must go) either way."""
    before, after = row_values(old), row_values(new)
    out: list[Any] = []
    for col, value in after.items():
        if value is None:
            out.append(None if before[col] is not None else UNSET_VALUE)
        elif rewrite or value != before[col]:
            out.append(value)
        else:
            out.append(UNSET_VALUE)
    return out


def cas_condition(old: Trigger) -> list[Any]:
    """The values of ``TRIGGER_CAS_CONDITION`` for a transition computed from ``old``."""
    return [old.status.value, old.claim_id, old.attempts, old.revision]


def creation_values(t: Trigger) -> list[Any]:
    """``row_values(t)`` for a new row: absent values unset rather than null (no tombstones)."""
    return [UNSET_VALUE if v is None else v for v in row_values(t).values()]


def trigger_from_row(trigger_id: str, row: dict[str, Any]) -> Trigger | None:
    """The trigger a ``get`` row holds; None if only a tombstone or a partial row is left."""
    (caller, callback_url, payload, fire_at_ms, created_at_ms, shard, path, status, attempts,
     last_error, fired_at_ms, claim_id, claimed_at_ms, next_attempt_at_ms,
     idem_key, schedule, occurrence_index, occurrence_second, occurrence_seq, occurrences_fired,
     tzdata_version, revision, snoozed_from, plan, channel_states,
     acked_seq, request_hash, registered_fire_at_ms, jitter_s, tags, labels, recipient,
     recipient_zone, expires_at_ms, max_lateness_s, flow_control, trace_parent,
     claim_lease_ms, priority,
     ) = (row[c] for c in s.TRIGGER_COLUMNS)
    if status is None:
        return None
    return Trigger(
        trigger_id=trigger_id, caller=caller, callback_url=callback_url, payload_json=payload,
        fire_at_ms=fire_at_ms, created_at_ms=created_at_ms, shard=shard, route=Route(path),
        status=Status(status), attempts=attempts or 0, last_error=last_error,
        fired_at_ms=fired_at_ms, claim_id=claim_id, claimed_at_ms=claimed_at_ms,
        next_attempt_at_ms=next_attempt_at_ms, idem_key=idem_key,
        schedule=Recurrence.from_dict(json.loads(schedule)) if schedule else None,
        occurrence_index=occurrence_index or 0, occurrence_second=bool(occurrence_second),
        occurrence_seq=occurrence_seq or 0, occurrences_fired=occurrences_fired or 0,
        tzdata_version=tzdata_version, revision=revision, snoozed_from=snoozed_from,
        plan=plan_from_json(plan) if plan else None,
        channel_states=states_from_json(channel_states) if channel_states else (),
        acked_seq=acked_seq, request_hash=request_hash,
        registered_fire_at_ms=registered_fire_at_ms, home_at_ms=row.get(s.COL_HOME_AT_MS),
        jitter_s=jitter_s or 0,
        tags=tuple(json.loads(tags)) if tags else (),
        labels=tuple(sorted(json.loads(labels).items())) if labels else (),
        recipient=recipient, recipient_zone=bool(recipient_zone),
        expires_at_ms=expires_at_ms, max_lateness_s=max_lateness_s,
        flow_control=flow_from_json(flow_control) if flow_control else None,
        trace_parent=trace_parent, claim_lease_ms=claim_lease_ms,
        priority=Priority(priority) if priority else Priority.NORMAL,  # null: before 033
    )


def encode_request(t: Trigger) -> str:
    """The creation fields of a trigger, as the idempotency record's ``request`` JSON."""
    return json.dumps({
        s.REQ_CALLBACK_URL: t.callback_url, s.REQ_PAYLOAD: t.payload_json,
        s.REQ_FIRE_AT_MS: t.fire_at_ms, s.REQ_CREATED_AT_MS: t.created_at_ms,
        s.REQ_SHARD: t.shard, s.REQ_PATH: t.route.value,
        s.REQ_SCHEDULE: t.schedule.to_dict() if t.schedule else None,
        s.REQ_OCCURRENCE_INDEX: t.occurrence_index, s.REQ_OCCURRENCE_SECOND: t.occurrence_second,
        s.REQ_TZDATA: t.tzdata_version, s.REQ_SNOOZED_FROM: t.snoozed_from,
        s.REQ_PLAN: plan_to_json(t.plan) if t.plan else None,
    })


def decode_request(trigger_id: str, caller: str, idem_key: str, text: str) -> Trigger:
    """The PENDING trigger an idempotency record's ``request`` JSON describes."""
    d = json.loads(text)
    return Trigger(
        trigger_id=trigger_id, caller=caller, callback_url=d[s.REQ_CALLBACK_URL],
        payload_json=d[s.REQ_PAYLOAD], fire_at_ms=d[s.REQ_FIRE_AT_MS],
        created_at_ms=d[s.REQ_CREATED_AT_MS], shard=d[s.REQ_SHARD],
        route=Route(d[s.REQ_PATH]), idem_key=idem_key,
        schedule=Recurrence.from_dict(d[s.REQ_SCHEDULE]) if d.get(s.REQ_SCHEDULE) else None,
        occurrence_index=d.get(s.REQ_OCCURRENCE_INDEX, 0),
        occurrence_second=d.get(s.REQ_OCCURRENCE_SECOND, False),
        tzdata_version=d.get(s.REQ_TZDATA), snoozed_from=d.get(s.REQ_SNOOZED_FROM),
        plan=plan_from_json(d[s.REQ_PLAN]) if d.get(s.REQ_PLAN) else None,
    )
