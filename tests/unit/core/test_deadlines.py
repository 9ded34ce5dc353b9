"""Deadlines (core.deadlines): which bound applies, when an occurrence is expired (lateness
from the jittered instant), the request fields' shapes, and a series ending at expiresAt."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from trigger_service.core.deadlines import (
    check_expiry,
    deadline_ms,
    expired,
    expiry_error,
    parse_expires_at,
    parse_max_lateness,
)
from trigger_service.core.errors import ExpiresBeforeFire, InvalidRequest
from trigger_service.core.model import Route, Trigger
from trigger_service.core.time import series
from trigger_service.core.time.catchup import CatchUpPolicy
from trigger_service.core.time.jitter import jitter_offset_ms
from trigger_service.core.time.recurrence import Recurrence, RuleKind, parse_rule
from trigger_service.core.time.zones import load_zone

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000  # on the hour
HOUR = 3_600_000


def one_time(**changes: object) -> Trigger:
    t = Trigger(trigger_id="trg_01HF7YAT00CM52FQVQTBF9PFJQ", caller="orders",
                callback_url="https://orders.internal/cb", payload_json="null",
                fire_at_ms=T0, created_at_ms=T0 - HOUR, shard=0, route=Route.SWEEP)
    return replace(t, **changes)  # type: ignore[arg-type]


def hourly(**changes: object) -> Trigger:
    start = datetime.fromtimestamp(T0 / 1000, UTC).replace(tzinfo=None)
    rec = Recurrence(RuleKind.RRULE, parse_rule(RuleKind.RRULE, "FREQ=HOURLY",
                                                load_zone("UTC"), start), "UTC", start)
    return one_time(schedule=rec, **changes)


def test_no_bound_is_no_deadline() -> None:
    t = one_time()
    assert deadline_ms(t) is None and not expired(t, T0 + 365 * 24 * HOUR)


@pytest.mark.parametrize(("expires_at_ms", "max_lateness_s", "deadline"), [
    (T0 + 60_000, None, T0 + 60_000),
    (None, 30, T0 + 30_000),
    (T0 + 60_000, 30, T0 + 30_000),  # the earlier bound wins
    (T0 + 10_000, 30, T0 + 10_000),
])
def test_the_earlier_bound_is_the_deadline(expires_at_ms: int | None,
                                           max_lateness_s: int | None, deadline: int) -> None:
    t = one_time(expires_at_ms=expires_at_ms, max_lateness_s=max_lateness_s)
    assert deadline_ms(t) == deadline
    assert not expired(t, deadline)  # sent at the deadline itself is in time
    assert expired(t, deadline + 1)


def test_lateness_counts_from_the_jittered_instant() -> None:
    t = one_time(jitter_s=3600, max_lateness_s=30)
    jittered = t.jittered(T0)
    assert jittered.jitter_ms > 0 and jittered.fire_at_ms > T0
    assert deadline_ms(jittered) == jittered.fire_at_ms + 30_000
    assert not expired(jittered, T0 + 30_000 + jittered.jitter_ms)


def test_the_error_names_the_bound_that_passed_and_the_last_attempt() -> None:
    lateness = one_time(max_lateness_s=30, expires_at_ms=T0 + HOUR)
    text = expiry_error(lateness, T0 + 45_000, "HTTP 503")
    assert text.startswith("not sent within maxLatenessSeconds 30")
    assert "45 s late" in text and text.endswith("; last attempt: HTTP 503")
    expiry = one_time(max_lateness_s=300, expires_at_ms=T0 + 60_000)
    assert expiry_error(expiry, T0 + 61_000).startswith(
        "not sent by expiresAt 2023-11-14T22:01:00.000Z")


@pytest.mark.parametrize("value", [0, -5, True, "30", 1.5, 366 * 86_400 + 1])
def test_max_lateness_must_be_a_whole_positive_number_of_seconds(value: object) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_max_lateness(value)
    assert e.value.extra["field"] == "maxLatenessSeconds"


def test_max_lateness_absent_or_null_is_none() -> None:
    assert parse_max_lateness(None) is None and parse_max_lateness(1) == 1


@pytest.mark.parametrize("value", ["2027-01-01T00:00:00", "tomorrow", 1_700_000_000_000, True])
def test_expires_at_is_an_instant_with_an_offset(value: object) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_expires_at(value)
    assert e.value.extra["field"] == "expiresAt"


def test_expires_at_with_an_offset_is_read_as_the_instant() -> None:
    assert parse_expires_at("2023-11-14T23:00:00+01:00") == T0 == parse_expires_at(
        "2023-11-14T22:00:00Z")
    assert parse_expires_at(None) is None


def test_expires_at_before_the_first_fire_time_is_refused() -> None:
    check_expiry(T0, T0)  # at the fire time: that one may still be sent
    check_expiry(None, T0)
    with pytest.raises(ExpiresBeforeFire) as e:
        check_expiry(T0 - 1, T0)
    assert e.value.status == 422 and e.value.extra["field"] == "expiresAt"


def test_a_series_has_no_occurrence_after_expires_at() -> None:
    t = hourly(expires_at_ms=T0 + HOUR + 30 * 60_000)
    step = dict(now_ms=T0, horizon_days=30, direct_max_delay_s=900)
    nxt = series.next_after(t, fired=True, **step)
    assert nxt is not None and nxt.fire_at_ms == T0 + HOUR and nxt.occurrence_seq == 1
    assert series.next_after(nxt, fired=True, **step) is None  # T0 + 2 h is after it
    # The bound is on the jittered instant: an occurrence jittered past it is none either.
    at_bound = hourly(expires_at_ms=T0 + HOUR)
    assert series.next_after(at_bound, fired=False, **step) is not None
    jittered = hourly(expires_at_ms=T0 + HOUR, jitter_s=600).jittered(T0)
    assert jitter_offset_ms(f"{jittered.trigger_id}.2", 600) > 0  # (the next one's)
    assert series.next_after(jittered, fired=False, **step) is None


def test_catch_up_to_an_occurrence_after_expires_at_is_none() -> None:
    t = hourly(expires_at_ms=T0 + HOUR + 1)
    now_ms = T0 + 3 * HOUR
    # ``all`` fires the current one (T0, before expiresAt; the dispatcher expires it if late).
    assert series.catch_up(t, now_ms=now_ms, horizon_days=30, direct_max_delay_s=900)[0] is t
    # ``latest`` would go on at T0 + 2 h: after expiresAt, so nothing is left.
    moved, _ = series.catch_up(t, policy=CatchUpPolicy.LATEST, now_ms=now_ms,
                               horizon_days=30, direct_max_delay_s=900)
    assert moved is None
