"""``OpenMarks``: how far a mark may move, what a probe holds, which holds go, and that no
entry written below a mark is left unheld (``adapters.cassandra.open_marks``). The reads
are canned here; ``tests/integration/test_open_marks.py`` runs the same on Cassandra."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra.open_marks import (
    HOLD_MAX,
    HOLD_PER_PROBE,
    PROBE_SPAN_MS,
    READER_STEP_MS,
    STRAGGLER_MS,
    Held,
    OpenMarks,
    gone,
    held_write,
)
from trigger_service.core.model import Route, Status, Trigger

HOUR_MS = 3_600_000
HOUR = 500_000
H0 = HOUR * HOUR_MS
NOW_MS = H0 + 3 * HOUR_MS  # the hour is long past
LAG = s.OPEN_MARK_LAG_MS


def trigger(fire_at_ms: int, tid: str = "trg_A", shard: int = 8) -> Trigger:
    return Trigger(trigger_id=tid, caller="c", callback_url="https://r.example/", payload_json="{}",
                   fire_at_ms=fire_at_ms, created_at_ms=H0 - HOUR_MS, shard=shard,
                   route=Route.SWEEP, home_at_ms=fire_at_ms)


def entry_row(ms: int, tid: str) -> dict[str, Any]:
    return {s.COL_FIRE_AT_MS: ms, s.COL_TRIGGER_ID: tid, s.COL_HOME_AT_MS: ms, s.COL_SHARD: 0,
            s.COL_TTL: 3600}


class Cql:
    """Canned answers by statement name; every statement and batch run, recorded."""

    def __init__(self, mark: tuple[int, str] | None = None, held: Sequence[Held] = (),
                 entries: Sequence[dict[str, Any]] = (),
                 triggers: Sequence[Trigger | None] = ()) -> None:
        self.mark, self.held, self.entries, self.triggers = mark, held, entries, triggers
        self.ran: list[tuple[str, Sequence[Any]]] = []
        self.batches: list[list[tuple[str, Sequence[Any]]]] = []

    async def run(self, name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        self.ran.append((name, params))
        if name == "open_marks":
            rows = [{s.COL_MARK: self.mark, **h.row(), s.COL_WRITTEN_US: h.written_us}
                    for h in self.held][:params[-1]]
            return rows or ([{s.COL_MARK: self.mark, s.COL_FIRE_AT_MS: None}]
                            if self.mark else [])
        assert name == "open_probe"
        return list(self.entries)[:params[-1]]

    async def batch(self, writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        self.batches.append(list(writes))

    async def get_many_at(self, where: Sequence[tuple[str, int | None, int]]
                          ) -> list[Trigger | None]:
        return list(self.triggers)

    def marks(self) -> OpenMarks:
        m = OpenMarks(self.run, self.batch, self.get_many_at)
        m.probe_one_in = 1
        return m

    def probe_range(self) -> Sequence[Any]:
        return next(p for n, p in self.ran if n == "open_probe")

    def written(self, name: str) -> list[Sequence[Any]]:
        return [p for b in self.batches for n, p in b if n == name]


async def test_a_probe_reads_from_the_mark_up_to_short_of_its_own_fire_time() -> None:
    cql = Cql(mark=(H0 + 60_000, "trg_M"))
    await cql.marks().probe(trigger(H0 + 120_000), NOW_MS)
    assert cql.probe_range() == ["c", HOUR, 0, H0 + 60_000, "trg_M",
                                 H0 + 120_000 - STRAGGLER_MS, "", HOLD_PER_PROBE + 1]
    # An empty range: the mark goes to its end.
    assert cql.written("open_mark_put") == [[s.OPEN_MARK_TTL_S, (H0 + 90_000, ""), "c", HOUR, 0]]
    cql = Cql(mark=(H0 + 60_000, "trg_M"))
    await cql.marks().probe(trigger(H0 + 90_000), NOW_MS)  # behind the mark: nothing to do
    assert [n for n, _ in cql.ran] == ["open_marks"] and cql.batches == []


async def test_a_probe_reads_at_most_its_span_and_never_past_now_less_the_lag() -> None:
    cql = Cql()
    await cql.marks().probe(trigger(H0 + 50 * 60_000), NOW_MS)
    assert cql.probe_range()[3:7] == [H0, "", H0 + PROBE_SPAN_MS, ""]  # no mark: the hour's start
    cql = Cql(mark=(H0 + 390_000, ""))
    now_ms = H0 + 10 * 60_000
    await cql.marks().probe(trigger(H0 + 9 * 60_000), now_ms)
    assert cql.probe_range()[5] == now_ms - LAG
    cql = Cql()
    await cql.marks().probe(trigger(H0 + 60_000), H0 + 60_000)  # all within the lag
    assert cql.ran == [("open_marks", ["c", HOUR, 0, HOLD_MAX + 1])] and cql.batches == []


async def test_a_probe_holds_what_it_finds_and_marks_past_it_in_one_batch() -> None:
    found = [entry_row(H0 + i, f"trg_{i}") for i in range(3)]
    cql = Cql(entries=found)
    await cql.marks().probe(trigger(H0 + 50 * 60_000), NOW_MS)
    [batch] = cql.batches
    assert [(n, p[3:5]) for n, p in batch] == [
        ("open_held_put", [H0, "trg_0"]), ("open_held_put", [H0 + 1, "trg_1"]),
        ("open_held_put", [H0 + 2, "trg_2"]), ("open_mark_put", [HOUR, 0])]
    assert batch[-1][1][1] == (H0 + PROBE_SPAN_MS, "")


async def test_a_probe_that_finds_more_than_it_holds_marks_the_first_it_did_not() -> None:
    found = [entry_row(H0 + i, f"trg_{i:02d}") for i in range(HOLD_PER_PROBE + 1)]
    cql = Cql(entries=found)
    await cql.marks().probe(trigger(H0 + 50 * 60_000), NOW_MS)
    assert len(cql.written("open_held_put")) == HOLD_PER_PROBE
    assert cql.written("open_mark_put")[0][1] == (H0 + HOLD_PER_PROBE, f"trg_{HOLD_PER_PROBE}")


async def test_a_full_partition_drops_what_went_and_holds_no_more_than_it_may() -> None:
    old_us = (NOW_MS - LAG - 1) * 1000
    held = [Held(((H0 + i, f"trg_h{i:02d}"), H0 + i, 0), old_us) for i in range(HOLD_MAX)]
    triggers: list[Trigger | None] = [trigger(H0 + i, f"trg_h{i:02d}") for i in range(HOLD_MAX)]
    for i in (7, 8):  # went: room for three
        triggers[i] = replace(trigger(H0 + i, f"trg_h{i:02d}"), status=Status.FIRED)
    triggers[20] = None
    found = [entry_row(H0 + 1_000 + i, f"trg_{i:02d}") for i in range(5)]
    cql = Cql(mark=(H0 + 1_000, ""), held=held, entries=found, triggers=triggers)
    await cql.marks().probe(trigger(H0 + 50 * 60_000), NOW_MS)
    # One range delete a run, at now less the lag: no hold written since is touched.
    ts_us = (NOW_MS - LAG) * 1000
    assert cql.written("open_held_drop") == [
        [ts_us, "c", HOUR, 0, H0 + 7, "trg_h07", H0 + 8, "trg_h08"],
        [ts_us, "c", HOUR, 0, H0 + 20, "trg_h20", H0 + 20, "trg_h20"]]
    assert [p[4] for p in cql.written("open_held_put")] == ["trg_00", "trg_01", "trg_02"]
    assert cql.written("open_mark_put")[0][1] == (H0 + 1_003, "trg_03")


async def test_an_entry_already_held_is_not_held_again() -> None:
    held = [Held(((H0 + 5, "trg_5"), H0 + 5, 0), 1)]
    cql = Cql(held=held, entries=[entry_row(H0 + 5, "trg_5")])
    await cql.marks().probe(trigger(H0 + 50 * 60_000), NOW_MS)
    assert cql.written("open_held_put") == []
    assert cql.written("open_mark_put")[0][1] == (H0 + PROBE_SPAN_MS, "")


async def test_one_finisher_in_probe_one_in_probes() -> None:
    cql = Cql()
    marks = cql.marks()
    marks.probe_one_in = 64
    for i in range(640):
        await marks.probe(trigger(H0 + 50 * 60_000 + i, f"trg_{i}"), NOW_MS)
    assert 3 <= sum(1 for n, _ in cql.ran if n == "open_marks") <= 30


def test_a_reader_moves_the_mark_to_what_it_found_first_if_that_skips_enough() -> None:
    start = (H0 + 60_000, "trg_M")
    moved = OpenMarks.moved("c", HOUR, 3, start, (H0 + 60_000 + READER_STEP_MS, "x"), NOW_MS)
    assert moved == ("open_mark_put", [s.OPEN_MARK_TTL_S, (H0 + 60_000 + READER_STEP_MS, "x"),
                                       "c", HOUR, 3])
    assert OpenMarks.moved("c", HOUR, 3, start, (H0 + 61_000, "x"), NOW_MS) is None
    # Nothing found: to the hour's end, or now less the lag.
    assert OpenMarks.moved("c", HOUR, 3, start, None, NOW_MS) == (
        "open_mark_put", [s.OPEN_MARK_TTL_S, (H0 + HOUR_MS, ""), "c", HOUR, 3])
    now_ms = H0 + 30 * 60_000
    assert OpenMarks.moved("c", HOUR, 3, start, None, now_ms) == (
        "open_mark_put", [s.OPEN_MARK_TTL_S, (now_ms - LAG, ""), "c", HOUR, 3])


def test_a_hold_goes_only_once_its_trigger_left_and_it_is_older_than_the_lag() -> None:
    t = trigger(H0 + 5)
    old = Held(((H0 + 5, t.trigger_id), H0 + 5, 8), (NOW_MS - LAG - 1) * 1000)
    young = replace(old, written_us=(NOW_MS - LAG + 1) * 1000)
    assert not gone(old, t, NOW_MS)  # still open there
    assert not gone(old, replace(t, status=Status.IN_FLIGHT), NOW_MS)
    assert not gone(old, replace(t, status=Status.PAUSED), NOW_MS)
    for left in (replace(t, status=Status.CANCELLED), replace(t, fire_at_ms=H0 + 6), None):
        assert gone(old, left, NOW_MS)
        # Its writer holds an entry before the row or LWT that puts the trigger there.
        assert not gone(young, left, NOW_MS)


def test_a_writer_holds_an_entry_whose_fire_time_is_long_before_the_write() -> None:
    ts_us = NOW_MS * 1000
    assert held_write(trigger(NOW_MS - s.OPEN_EARLY_MS), 60, ts_us) is None
    hold = held_write(trigger(NOW_MS - s.OPEN_EARLY_MS - 1, shard=11), 60, ts_us)
    assert hold == ("open_held_put", ["c", (NOW_MS - s.OPEN_EARLY_MS - 1) // HOUR_MS, 3,
                                      NOW_MS - s.OPEN_EARLY_MS - 1, "trg_A",
                                      NOW_MS - s.OPEN_EARLY_MS - 1, 11, 60, ts_us])


@given(setter_ms=st.integers(0, 10**13), fire_back_ms=st.integers(0, 10**9),
       written_after_ms=st.integers(-s.OPEN_WRITE_DELAY_MS, 10**9))
def test_an_entry_below_any_mark_that_its_setter_did_not_see_holds_itself(
        setter_ms: int, fire_back_ms: int, written_after_ms: int) -> None:
    """A setter at ``setter_ms`` saw every entry written before ``setter_ms -
    OPEN_WRITE_DELAY_MS``. Any later entry with a fire time below a mark it may set (below
    ``setter_ms - OPEN_MARK_LAG_MS``) is held by its writer."""
    highest = OpenMarks.moved("c", 0, 0, (-(2**62), ""), None, setter_ms)
    assert highest is not None
    mark = highest[1][1]
    assert mark <= (setter_ms - LAG, "")
    fire_at_ms = mark[0] - 1 - fire_back_ms
    written_ms = setter_ms + written_after_ms  # not acknowledged when the setter read
    assert held_write(trigger(fire_at_ms), 60, written_ms * 1000) is not None


def test_holds_go_a_run_at_a_time_and_a_young_or_open_one_ends_a_run() -> None:
    old_us, young_us = (NOW_MS - LAG - 1) * 1000, (NOW_MS - LAG + 1) * 1000
    fired = [replace(trigger(H0 + i, f"trg_{i}"), status=Status.FIRED) for i in range(7)]
    checked: list[tuple[Held, Trigger | None]] = [
        (Held(((H0 + i, f"trg_{i}"), H0 + i, 8), young_us if i == 4 else old_us), t)
        for i, t in enumerate(fired)]
    checked[2] = (checked[2][0], trigger(H0 + 2, "trg_2"))  # still open
    drops = OpenMarks.drops("c", checked, NOW_MS)
    assert [(p[4:6], p[6:8]) for _, p in drops] == [
        ([H0, "trg_0"], [H0 + 1, "trg_1"]), ([H0 + 3, "trg_3"], [H0 + 3, "trg_3"]),
        ([H0 + 5, "trg_5"], [H0 + 6, "trg_6"])]
    assert {(n, p[0], p[3]) for n, p in drops} == {("open_held_drop", (NOW_MS - LAG) * 1000, 0)}


async def test_an_hour_no_mark_or_hold_can_reach_yet_is_read_without_them() -> None:
    cql = Cql()
    now_ms = H0 - s.OPEN_WRITE_DELAY_MS  # the hour starts past any writer's clock
    assert await cql.marks().hour("c", HOUR, now_ms) == [None] * s.OPEN_PARTS
    assert await cql.marks().held("c", HOUR, 0, (H0, ""), 10, now_ms) == []
    assert cql.ran == []
