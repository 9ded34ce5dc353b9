"""``AuditLog`` (``MemoryStore``, ``CassandraStore``) against one contract: an entry is
listed in its caller's scope and the operators' (an operator's in the operators' only),
newest first, filtered, paged with a cursor that neither repeats nor skips, across hours
with nothing in between; appending twice is one entry."""

from __future__ import annotations

from tests.contract.support import Store, unique
from trigger_service.core.audit import HOUR_MS, AuditAction, AuditEntry, AuditQuery

T0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS  # an hour's start
TTL_S = 3_600


def _entry(at_ms: int, actor: str, caller: str | None, action: AuditAction = AuditAction.CANCEL,
           outcome: str = "ok") -> AuditEntry:
    rid = unique("r")[-16:]
    return AuditEntry(at_ms, rid, actor, action, f"trg_{rid}", rid, outcome, caller)


async def _all(store: Store, query: AuditQuery, limit: int) -> list[AuditEntry]:
    out: list[AuditEntry] = []
    cursor = None
    for _ in range(50):
        page = await store.list_audit(query, cursor, limit)
        out += page.items
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor
    raise AssertionError("no end")


async def test_a_callers_entries_are_its_own_and_the_operators(store: Store) -> None:
    caller, other, operator = unique("aud-"), unique("aud-"), unique("op-")
    mine = [_entry(T0 + i, caller, caller) for i in range(3)]
    ops = _entry(T0 + 5, operator, None, AuditAction.CALLER_PAUSE)
    await store.append_audit([*mine, ops], TTL_S)
    own = await store.list_audit(AuditQuery(caller, T0, T0 + HOUR_MS), None, 10)
    assert own.items == mine[::-1] and own.next_cursor is None
    assert (await store.list_audit(AuditQuery(other, T0, T0 + HOUR_MS), None, 10)).items == []
    seen = await _all(store, AuditQuery(None, T0, T0 + HOUR_MS, actor=operator), 10)
    assert seen == [ops]
    seen = await _all(store, AuditQuery(None, T0, T0 + HOUR_MS, actor=caller), 10)
    assert seen == mine[::-1]


async def test_pages_cross_hours_without_repeats_and_filters_apply(store: Store) -> None:
    caller = unique("aud-")
    # Three hours with entries and empty hours between them.
    at = [T0, T0 + 1, T0 + 3 * HOUR_MS + 7, T0 + 3 * HOUR_MS + 8, T0 + 9 * HOUR_MS]
    entries = [_entry(ms, caller, caller, AuditAction.PAUSE if i % 2 else AuditAction.RUN)
               for i, ms in enumerate(at)]
    await store.append_audit(entries, TTL_S)
    await store.append_audit(entries[:2], TTL_S)  # a retry: the same entries
    window = AuditQuery(caller, T0, T0 + 10 * HOUR_MS)
    for limit in (1, 2, 3, 10):
        assert await _all(store, window, limit) == entries[::-1], limit
    pauses = AuditQuery(caller, T0, T0 + 10 * HOUR_MS, action=AuditAction.PAUSE)
    assert await _all(store, pauses, 1) == [entries[3], entries[1]]
    since = AuditQuery(caller, T0 + 3 * HOUR_MS + 8, T0 + 10 * HOUR_MS)
    assert await _all(store, since, 2) == [entries[4], entries[3]]
    operators = AuditQuery(None, T0, T0 + 10 * HOUR_MS, actor=caller)
    assert await _all(store, operators, 2) == entries[::-1]
