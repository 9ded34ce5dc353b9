"""The chaos suite's own logic, without services: the fault schedule, the report's numbers,
the targets, and the ring fault's commands (through a fake stack)."""

from __future__ import annotations

import asyncio
from typing import cast

from bench.chaos import report
from bench.chaos.faults import KINDS, Fault, Injector, schedule
from bench.chaos.load import KeyResult, parse_iso_ms
from bench.chaos.receiver import Delivery
from bench.chaos.stack import Script, Stack, now_ms, redis_port


def test_the_short_schedule_has_each_kind_once_and_the_full_one_cycles() -> None:
    once = schedule(KINDS, 3, 4, 40, once=True)
    assert [f.kind for f in once] == list(KINDS)
    assert [f.planned_s for f in once] == [3 + 4 * i for i in range(len(KINDS))]
    full = schedule(KINDS, 3, 5, 90, once=False)
    assert len(full) == 18
    assert [f.kind for f in full[:len(KINDS)]] == [f.kind for f in full[len(KINDS):14]]


def key(i: int, tid: str, fire: int) -> KeyResult:
    return KeyResult(f"k{i}", i, fire, {tid}, fire, attempts=1, sent_ms=0, answered_ms=0)


def delivery(tid: str, at: int, key: str | None = None) -> Delivery:
    return Delivery(tid, at, 1, key, tid, None)


def data(results: list[KeyResult], deliveries: list[Delivery]) -> report.RunData:
    return report.RunData(0, results, deliveries, [Fault("kill_api", 1, injected_ms=1000)], 20)


def test_counts_lost_duplicates_early_and_lag() -> None:
    results = [key(0, "a", 10_000), key(1, "b", 10_000), key(2, "c", 20_000)]
    got = report.trigger_counts(data(results, [
        delivery("a", 10_100), delivery("a", 12_000),  # on time, then a duplicate
        delivery("b", 9_999),                         # early by 1 ms
    ]))
    assert got["registered"] == 3
    assert got["delivered"] == 2
    assert got["lost"] == 1 and got["lost_ids"] == ["c"]
    assert got["duplicates"] == 1 and got["duplicates_pct"] == round(100 / 3, 3)
    assert got["early"] == 1
    assert got["lag_ms"]["max"] == 100


def test_a_key_delivered_under_a_second_trigger_id_is_counted() -> None:
    results = [key(0, "a", 10_000)]
    got = report.trigger_counts(data(results, [delivery("a", 10_000, "k0"),
                                               delivery("z", 10_000, "k0")]))
    assert got["keys_with_several_triggers"] == 1
    assert got["unknown_deliveries"] == 1


def attempt(k: int, outcome: str, status: int | None = None) -> dict[str, object]:
    return {"attempt": k, "outcome": outcome, "statusCode": status, "error": "timeout after 10s"}


def test_a_retry_after_an_unanswered_attempt_is_explained_and_nothing_else_is() -> None:
    forced = report.forced_by_unanswered_attempts
    assert forced([1, 2], [attempt(2, "delivered", 200), attempt(1, "retry")])
    assert forced([2, 1], [attempt(2, "delivered", 200), attempt(1, "retry")])
    assert not forced([1, 1], [attempt(1, "delivered", 200)])  # one claim sent twice
    assert not forced([1, 2], [attempt(2, "delivered", 200)])  # a claim taken over
    assert not forced([1, 2], [attempt(1, "retry", 500), attempt(2, "delivered", 200)])
    assert not forced([1, 2], [])


def test_duplicates_are_split_by_what_explains_them() -> None:
    results = [key(0, "t0", 10_000), *(key(i, f"t{i}", 2_000) for i in (1, 2, 3))]
    kill = Fault("kill_dispatcher", 9, injected_ms=12_000, status="injected")
    twice = [delivery("t0", 10_000), *(delivery(f"t{i}", 2_000 + i) for i in (1, 2, 3)),
             Delivery("t0", 11_000, 2, None, "t0", None),  # first one 2 s before the kill
             Delivery("t1", 4_000, 2, None, "t1", None),  # its attempt 1 timed out
             Delivery("t2", 6_002, 1, None, "t2", None)]  # attempt 1 twice: sent twice
    run = report.RunData(0, results, twice, [kill], 20, histories={
        "t1": [attempt(2, "delivered", 200), attempt(1, "retry")],
        "t2": [attempt(1, "delivered", 200)]})
    got = report.trigger_counts(run)
    assert (got["duplicates"], got["duplicates_at_a_kill"],
            got["duplicates_after_unanswered_attempts"], got["duplicates_unexplained"]) == (
        3, 1, 1, 1)
    assert got["duplicates_unexplained_samples"][0]["id"] == "t2"
    assert got["duplicates_unexplained_samples"][0]["arrivals"] == [[2, 1], [4_002, 1]]


def test_targets() -> None:
    results = [key(i, f"t{i}", 10_000) for i in range(1000)]
    ok = report.build(data(results, [delivery(f"t{i}", 10_000 + i) for i in range(1000)]), {})
    assert ok["passed"] and ok["misses"] == []
    one_dup = [delivery(f"t{i}", 10_000) for i in range(1000)] + [delivery("t0", 11_000)]
    assert report.build(data(results, one_dup), {})["passed"]  # 0.1 % is allowed
    two_dups = [*one_dup, delivery("t1", 11_000)]
    assert "duplicates 0.2 % > 0.1 %" in report.build(data(results, two_dups), {})["misses"]
    slow = [delivery(f"t{i}", 10_000 + (31_000 if i == 5 else 0)) for i in range(1000)]
    assert "max lag 31000 ms > 30000 ms" in report.build(data(results, slow), {})["misses"]


def test_the_heal_of_a_fault_is_the_largest_lag_due_within_10_s_after_it() -> None:
    results = [key(0, "a", 2_000), key(1, "b", 10_000), key(2, "c", 12_000)]
    rows = report.fault_rows(data(results, [delivery("a", 9_000), delivery("b", 10_500),
                                            delivery("c", 40_000)]))
    assert rows[0]["heal_max_lag_s"] == 7.0  # c (due 12 s) is outside [1 s, 11 s)
    assert rows[0]["fired_in_window"] == 2


class FakeStack:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], dict[str, str]]] = []

    async def arun(self, *args: str, extra: dict[str, str] | None = None) -> Script:
        self.calls.append((args, extra or {}))
        return Script(0, 0.1)


def test_the_ring_fault_stops_node_2_and_restarts_missing_nodes() -> None:
    async def run(nodes: int) -> tuple[FakeStack, Fault]:
        stack = FakeStack()
        fault = Fault("cassandra_node_restart", 0)
        await Injector(cast(Stack, stack), [fault], now_ms(), nodes).run()
        return stack, fault

    single, fault = asyncio.run(run(1))
    assert single.calls == [] and fault.status == "skipped"
    ring, fault = asyncio.run(run(3))
    assert fault.status == "injected" and fault.back_ms is not None
    assert ring.calls == [
        (("down.sh", "cassandra"), {"CASSANDRA_NODES": "3", "CASSANDRA_NODE": "2"}),
        (("up.sh", "cassandra"), {"CASSANDRA_NODES": "3"}),
    ]


def test_helpers() -> None:
    assert parse_iso_ms("2026-11-23T07:00:01.234Z") == 1795417201234
    assert redis_port("redis://127.0.0.1:6479/0") == 6479
    assert redis_port("redis://localhost/0") == 6379
