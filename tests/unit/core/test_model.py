from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trigger_service.core.model import (
    Route,
    Status,
    Trigger,
    bucket_minute,
    fire_month,
    is_trigger_id,
    keyed_trigger_id,
    new_trigger_id,
    next_month,
    shard_of,
)
from trigger_service.core.time.timing import (
    datetime_to_ms,
    format_rfc3339_ms,
    ms_to_datetime,
    parse_rfc3339_ms,
)


def test_trigger_ids_are_ulids_that_sort_by_creation_time() -> None:
    a, b = new_trigger_id(1_700_000_000_000), new_trigger_id(1_700_000_000_001)
    assert is_trigger_id(a) and is_trigger_id(b)
    assert a < b
    assert not is_trigger_id("trg_123") and not is_trigger_id("../etc/passwd")


def test_a_keyed_trigger_id_is_its_callers_key_and_shaped_like_any_other() -> None:
    a = keyed_trigger_id("orders", "k1")
    assert a == keyed_trigger_id("orders", "k1"), "the same in every process and release"
    assert is_trigger_id(a) and a[4] in "01234567"  # 128 bits, as a ULID's
    others = {keyed_trigger_id("billing", "k1"), keyed_trigger_id("orders", "k2"),
              keyed_trigger_id("orders", "k1 "), keyed_trigger_id("order", "sk1"),
              keyed_trigger_id("orders\0k", "1")}
    assert a not in others and len(others) == 5
    # Pinned: an id that changed between releases would break every key's promise.
    assert a == "trg_7BZT7JJ55ER7S74PE8W810T6BQ"
    ids = {keyed_trigger_id("orders", f"key-{i}") for i in range(2000)}
    assert {shard_of(i, 64) for i in ids} == set(range(64))


def test_shard_is_stable_and_in_range() -> None:
    # A fixed value: the shard must never change between processes or releases.
    assert shard_of("trg_01HF7YAT3V8C3JV1RRETHBJNRB", 64) == shard_of(
        "trg_01HF7YAT3V8C3JV1RRETHBJNRB", 64)
    assert {shard_of(new_trigger_id(i), 64) for i in range(2000)} == set(range(64))


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-06-12T14:31:00Z", 1781274660000),
        ("2026-06-12T14:31:00.5Z", 1781274660500),
        ("2026-06-12T10:31:00.123456789-04:00", 1781274660123),
        ("2026-06-12t14:31:00z", 1781274660000),
        ("2026-06-13T00:01:00+09:30", 1781274660000),
    ],
)
def test_parse_rfc3339(text: str, ms: int) -> None:
    assert parse_rfc3339_ms(text) == ms


@pytest.mark.parametrize(
    "text",
    ["2026-06-12T14:31:00", "2026-06-12", "2026-13-01T00:00:00Z", "2026-06-12T25:00:00Z",
     "20260612T143100Z", "2026-06-12T14:31:00+0200", "tomorrow", ""],
)
def test_parse_rfc3339_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339_ms(text)


@given(st.integers(min_value=0, max_value=4_102_444_800_000))
def test_format_parse_round_trip(ms: int) -> None:
    text = format_rfc3339_ms(ms)
    assert text.endswith("Z") and len(text) == len("2026-06-12T14:31:00.000Z")
    assert parse_rfc3339_ms(text) == ms
    assert datetime_to_ms(ms_to_datetime(ms)) == ms


def test_buckets_and_months() -> None:
    assert bucket_minute(59_999) == 0 and bucket_minute(60_000) == 1
    assert fire_month(parse_rfc3339_ms("2026-12-31T23:59:59.999Z")) == 202612
    assert fire_month(parse_rfc3339_ms("2027-01-01T00:00:00Z")) == 202701
    assert next_month(202612) == 202701 and next_month(202601) == 202602


def test_status_terminal_and_due_time() -> None:
    assert {s for s in Status if s.terminal} == {Status.FIRED, Status.FAILED, Status.CANCELLED}
    t = Trigger("trg_x", "c", "http://x/", "null", 1000, 0, 0, Route.DIRECT)
    assert t.due_at_ms() == 1000
    later = replace(t, status=Status.PENDING, next_attempt_at_ms=5000, attempts=1)
    assert later.due_at_ms() == 5000 and t.attempts == 0  # frozen: the original is unchanged
