"""In-memory fakes of every port, for unit tests: same contracts, no I/O, time from a Clock
(the idempotency cache's is in ``memory.idempotency``).

The contract tests (``tests/contract``) run the same checks against these and the real
adapters. Each fake can be told to fail: ``fake.failures["get"] = StoreError("down")`` makes
the next calls of ``get`` raise it until the entry is removed.
"""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, MutableMapping, Sequence
from dataclasses import dataclass, field, fields, replace

from trigger_service.adapters.homes import Homes
from trigger_service.adapters.memory.audit import MemoryAuditLog
from trigger_service.adapters.memory.dead_letters import MemoryDeadLetters
from trigger_service.adapters.memory.debounce import MemoryDebounceHeads
from trigger_service.adapters.memory.failing import Failing as Failing
from trigger_service.adapters.memory.homes import LiveRows, MemoryKeyedRows, MemoryPointer
from trigger_service.adapters.memory.inbox import MemoryInbox
from trigger_service.adapters.memory.pauses import MemoryCallerPauses

# The queue's fake lives in its own module; tests import every fake from here.
from trigger_service.adapters.memory.queue import MemoryQueue as MemoryQueue
from trigger_service.adapters.memory.secrets import MemorySecrets
from trigger_service.adapters.memory.trigger_jobs import MemoryTriggerJobs
from trigger_service.core.errors import StoreTimeout
from trigger_service.core.model import (
    Status,
    Trigger,
    bucket_minute,
    fire_month,
    month_end_ms,
    month_start_ms,
)
from trigger_service.core.ports import Clock
from trigger_service.core.ports.crypto import ResealReport
from trigger_service.core.ports.homes import KeyedRows, creation_of
from trigger_service.core.ports.idempotency import IdempotencyRecord
from trigger_service.core.ports.values import BucketEntry, KeyedCreation, ListCursor, ListPage
from trigger_service.core.tags import TriggerFilter, trigger_terms


class MemoryStore(Failing, MemoryDeadLetters, MemoryInbox, MemoryTriggerJobs,
                  MemoryCallerPauses, MemorySecrets, MemoryDebounceHeads, MemoryAuditLog):
    """``TriggerCatalog``, ``IdempotencyStore`` (the legacy table), ``DueIndex``,
    ``SweepCursors``, ``Pingable``, (``MemoryDeadLetters``) the attempt log, dead letters
    and replay jobs, (``MemoryInbox``) the inbox, (``MemoryTriggerJobs``) the trigger jobs.

    Shaped as the real store (``memory.homes``): rows by (trigger id, home), a pointer per
    id, creation cells older than every transition and seal; ``triggers`` is the live view.
    ``delayed_row_writes = n`` makes the next n row creations time out (``StoreTimeout``)
    and land only at ``land_delayed_writes()``: a write Cassandra applied after its client
    gave up."""

    def __init__(self) -> None:
        super().__init__()
        self._init_pauses()
        self._init_dead_letters()
        self._init_inbox()
        self._init_trigger_jobs()
        self._init_secrets()
        self._init_debounce()
        self._init_audit()
        self.rows: dict[tuple[str, int | None], Trigger] = {}
        self.pointers: dict[str, MemoryPointer] = {}
        self.triggers: MutableMapping[str, Trigger] = LiveRows(self)
        self.zoned: dict[tuple[str, int], set[str]] = {}
        self.buckets: dict[tuple[int, int], list[BucketEntry]] = {}
        self.list_max_rows = 2000  # index entries one listing call may read (as Cassandra's)
        # Rows per page of the paged reads (zoned ids, job items), as Cassandra's fetch size.
        self.page_size = 5000
        self.idempotency: dict[tuple[str, str], IdempotencyRecord] = {}
        # Rows with cells newer than any creation's (a transition's Paxos writes), which a
        # plain create can no longer change; homes sealed or dropped (a delete newer than any
        # creation's cells: a creation landing later stays invisible).
        self._paxos_written: set[tuple[str, int | None]] = set()
        self._sealed: set[tuple[str, int]] = set()
        self.delayed_row_writes = 0
        self.delayed: list[Trigger] = []
        self.cursors: dict[tuple[str, int], int] = {}
        self.counters: dict[str, int] = {}
        self.keyed_rows: KeyedRows = MemoryKeyedRows(self)
        self._homes = Homes(self.keyed_rows)

    # --- creation --------------------------------------------------------------------
    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        self._enter("create")
        trigger = trigger.with_home()
        self._index(trigger)
        self._point(trigger, keyed=False)
        self._write_row(trigger)

    async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        self._enter("create_keyed")
        return await self._homes.create(trigger, index_ttl_s)

    def _point(self, t: Trigger, *, keyed: bool) -> None:
        p = self.pointers.setdefault(t.trigger_id, MemoryPointer(t.home_at_ms, t.shard,
                                                                 t.created_at_ms))
        p.written(t, keyed=keyed)

    def _write_row(self, t: Trigger) -> None:
        if self.delayed_row_writes > 0:
            self.delayed_row_writes -= 1
            self.delayed.append(t)
            raise StoreTimeout(f"row write of {t.trigger_id} timed out (it lands later)")
        self._land(t)

    def _land(self, t: Trigger) -> None:
        """A creation's cells arrive: they lose to a seal, to a transition and to a later
        creation's cells (timestamps), as Cassandra's do."""
        key = (t.trigger_id, t.home_at_ms)
        current = self.rows.get(key)
        if (t.home_at_ms is not None and (t.trigger_id, t.home_at_ms) in self._sealed) or (
                current is not None and (key in self._paxos_written
                                         or current.created_at_ms > t.created_at_ms)):
            return
        self.rows[key] = t

    def live_home(self, trigger_id: str) -> int | None:
        """The home ``triggers`` reads the id's row at (its pointer's settled home)."""
        p = self.pointers.get(trigger_id)
        return None if p is None else p.settled_home()

    def land_delayed_writes(self) -> None:
        """Apply the row writes that ``delayed_row_writes`` made time out, in order."""
        delayed, self.delayed = self.delayed, []
        for t in delayed:
            self._land(t)

    async def reseal_triggers(self) -> ResealReport:
        self._enter("reseal_triggers")
        return ResealReport(scanned=len(self.triggers))

    async def zoned_versions(self) -> list[str]:
        self._enter("zoned_versions")
        return sorted({v for v, _ in self.zoned})

    async def zoned_trigger_ids(self, tzdata_version: str, shard: int
                                ) -> AsyncIterator[list[str]]:
        self._enter("zoned_trigger_ids")
        # As Cassandra pages: each page read when asked for, after the last id yielded.
        after = ""
        while page := sorted(i for i in self.zoned.get((tzdata_version, shard), set())
                             if i > after)[:self.page_size]:
            yield page
            after = page[-1]

    def _index(self, trigger: Trigger) -> None:
        if trigger.tzdata_version is not None:
            self.zoned.setdefault((trigger.tzdata_version, trigger.shard), set()).add(
                trigger.trigger_id)
        entry = BucketEntry(trigger.trigger_id, trigger.fire_at_ms, trigger.shard, trigger.route,
                            trigger.home_at_ms)
        bucket = self.buckets.setdefault((bucket_minute(trigger.fire_at_ms), trigger.shard), [])
        if entry not in bucket:
            bisect.insort(bucket, entry, key=lambda e: (e.fire_at_ms, e.trigger_id))

    async def advance(self, old: Trigger, new: Trigger, index_ttl_s: int, now_ms: int, *,
                      patient: bool = False) -> bool:
        self._enter("advance")
        self._index(new)
        return await self.compare_and_set(old, new, patient=patient)

    async def get(self, trigger_id: str) -> Trigger | None:
        self._enter("get")
        p = self.pointers.get(trigger_id)
        if p is not None and p.home_at_ms is None:  # a test's row without a home
            return self.rows.get((trigger_id, None))
        return await self._homes.live(trigger_id, None if p is None else p.frozen())

    async def get_many(self, trigger_ids: Sequence[str]) -> list[Trigger | None]:
        self._enter("get_many")
        return [self.triggers.get(t) for t in trigger_ids]

    async def get_many_at(self, where: Sequence[tuple[str, int | None, int]]
                          ) -> list[Trigger | None]:
        self._enter("get_many")
        return [self.triggers.get(tid) if home is None else self._at(tid, home, shard)
                for tid, home, shard in where]

    def _at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        t = self.rows.get((trigger_id, home_at_ms))
        return t if t is not None and t.shard == shard else None

    async def get_at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        self._enter("get")
        row = self._at(trigger_id, home_at_ms, shard)
        return None if row is None else await self._homes.live_at(row)

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None, patient: bool = False
    ) -> bool:
        self._enter("compare_and_set")
        # A copy that does not say where its row is (made before its creation): the row
        # its pointer names, as the real store finds it.
        home = old.home_at_ms if old.home_at_ms is not None else self.live_home(old.trigger_id)
        key = (old.trigger_id, home)
        current = self.rows.get(key)
        if current is None or (current.status, current.claim_id, current.attempts,
                               current.revision) != (
                old.status, old.claim_id, old.attempts, old.revision):
            return False
        # As the real store writes: only the cells ``new`` changes relative to ``old`` (the
        # row as the caller last knew it), every cell when a TTL is given (a terminal write).
        if ttl_s is None:
            new = replace(current, **{f.name: getattr(new, f.name) for f in fields(Trigger)
                                      if getattr(new, f.name) != getattr(old, f.name)})
        self.rows[key] = new
        self._paxos_written.add(key)
        p = self.pointers.get(old.trigger_id)
        if ttl_s is not None and p is not None and p.creations and home is not None:
            # Finished: the pointer's last cells (with the row's TTL) name this row alone.
            p.creations, p.live_home = {creation_of(replace(current, home_at_ms=home))}, home
        return True

    async def list_by_caller(
        self, caller: str, *, start: ListCursor, last_month: int, limit: int,
        status: Status | None,
    ) -> ListPage:
        self._enter("list_by_caller")
        if status is not None and status.open:
            return self._open_page(caller, start, last_month, limit, status)
        # Newest created first, before ``start``; as the real store, reading at most
        # ``list_max_rows`` triggers.
        before = (start[1], start[2])
        keys = sorted(((t.created_at_ms, t.trigger_id) for t in self.triggers.values()
                       if t.caller == caller and (t.created_at_ms, t.trigger_id) < before),
                      reverse=True)
        found: list[Trigger] = []
        last: tuple[int, str] | None = None
        for read, key in enumerate(keys):
            if len(found) >= limit or read >= self.list_max_rows:
                break
            last = key
            t = self.triggers[key[1]]
            if status is None or t.status is status:
                found.append(t)
        rest = last is not None and keys[-1] < last
        return ListPage(found, (0, *last) if rest and last is not None else None)

    async def list_by_filter(self, caller: str, flt: TriggerFilter, *, before: ListCursor,
                             limit: int) -> ListPage:
        """As the term index answers it: the triggers carrying the filter's term, newest
        created first, at most ``list_max_rows`` of them read, each checked against the rest
        of the filter; a cursor unless none is left."""
        self._enter("list_by_filter")
        term, after = flt.driving_term, (before[1], before[2])
        keys = sorted(((t.created_at_ms, t.trigger_id) for t in self.triggers.values()
                       if t.caller == caller and term in trigger_terms(t)
                       and (t.created_at_ms, t.trigger_id) < after), reverse=True)
        read = keys[:min(limit, self.list_max_rows)]
        found = [t for key in read if flt.matches(t := self.triggers[key[1]])]
        while len(found) < limit and len(read) < min(len(keys), self.list_max_rows):
            t = self.triggers[keys[len(read)][1]]
            read.append(keys[len(read)])
            if flt.matches(t):
                found.append(t)
        more = len(read) < len(keys)
        return ListPage(found, (0, *read[-1]) if more and read else None)

    def _open_page(self, caller: str, start: ListCursor, last_month: int, limit: int,
                   status: Status) -> ListPage:
        """An open status's page, as the real store's open index answers it: only open
        triggers are read, by fire time, at most ``list_max_rows`` of them; a page ends
        short (even empty, with a cursor) only when that budget ran out first."""
        end_ms = month_end_ms(last_month)
        after = (max(start[1], month_start_ms(start[0]) - 1), start[2])
        keys = sorted((t.fire_at_ms, t.trigger_id) for t in self.triggers.values()
                      if t.caller == caller and t.status.open
                      and after < (t.fire_at_ms, t.trigger_id) and t.fire_at_ms < end_ms)
        found: list[Trigger] = []
        read = 0
        for read, (_, tid) in enumerate(keys, 1):
            if self.triggers[tid].status is status:
                found.append(self.triggers[tid])
            if len(found) == limit or read == self.list_max_rows:
                break
        last = keys[read - 1] if read and read < len(keys) else None
        return ListPage(found, None if last is None else (fire_month(last[0]), *last))

    async def legacy_record(self, caller: str, idem_key: str) -> IdempotencyRecord | None:
        self._enter("legacy_record")
        return self.idempotency.get((caller, idem_key))

    async def legacy_records_exist(self) -> bool:
        self._enter("legacy_records_exist")
        return bool(self.idempotency)

    async def put_if_absent(
        self, record: IdempotencyRecord, ttl_s: int
    ) -> IdempotencyRecord | None:
        self._enter("put_if_absent")
        key = (record.caller, record.idem_key)
        existing = self.idempotency.get(key)
        if existing is None:
            self.idempotency[key] = record
        return existing

    async def ping(self) -> None:
        self._enter("ping")

    async def bucket_entries(self, shard: int, after_ms: int, until_ms: int) -> list[BucketEntry]:
        self._enter("bucket_entries")
        out: list[BucketEntry] = []
        for minute in range(bucket_minute(after_ms + 1), bucket_minute(until_ms) + 1):
            out += [e for e in self.buckets.get((minute, shard), [])
                    if after_ms < e.fire_at_ms <= until_ms]
        return out

    async def load_cursors(self, group: str) -> dict[int, int]:
        self._enter("load_cursors")
        return {shard: ms for (g, shard), ms in self.cursors.items() if g == group}

    async def save_cursor(
        self, group: str, shard: int, promoted_until_ms: int, owner: str, fence: int
    ) -> None:
        self._enter("save_cursor")
        self.cursors[(group, shard)] = promoted_until_ms

    async def add_counters(self, deltas: dict[str, int]) -> None:
        self._enter("add_counters")
        for name, delta in deltas.items():
            if delta:
                self.counters[name] = self.counters.get(name, 0) + delta

    async def read_counters(self) -> dict[str, int]:
        self._enter("read_counters")
        return dict(self.counters)


@dataclass
class MemoryLease(Failing):
    """``Lease`` with TTLs on an injected clock; ``holders`` shows who has what."""

    clock: Clock
    ttl_ms: int
    holders: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # owner, fence, exp
    fences: dict[int, int] = field(default_factory=dict)
    members: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        Failing.__init__(self)

    def _holder(self, shard: int) -> tuple[str, int] | None:
        got = self.holders.get(shard)
        if got is None or got[2] <= self.clock.now_ms():
            self.holders.pop(shard, None)
            return None
        return got[0], got[1]

    async def acquire(self, shard: int, owner: str) -> int | None:
        self._enter("acquire")
        if self._holder(shard) is not None:
            return None
        fence = self.fences[shard] = self.fences.get(shard, 0) + 1
        self.holders[shard] = (owner, fence, self.clock.now_ms() + self.ttl_ms)
        return fence

    async def renew(self, leases: dict[int, int], owner: str) -> set[int]:
        self._enter("renew")
        kept = await self.held(leases, owner)
        for shard in kept:
            self.holders[shard] = (owner, leases[shard], self.clock.now_ms() + self.ttl_ms)
        return kept

    async def held(self, leases: dict[int, int], owner: str) -> set[int]:
        self._enter("held")
        return {s for s, fence in leases.items() if self._holder(s) == (owner, fence)}

    async def release(self, shard: int, fence: int, owner: str) -> None:
        self._enter("release")
        if self._holder(shard) == (owner, fence):
            del self.holders[shard]

    async def heartbeat(self, member: str, now_ms: int, ttl_ms: int) -> int:
        self._enter("heartbeat")
        self.members[member] = now_ms
        for m, seen in list(self.members.items()):
            if seen <= now_ms - ttl_ms:
                del self.members[m]
        return len(self.members)

    async def leave(self, member: str) -> None:
        self._enter("leave")
        self.members.pop(member, None)

