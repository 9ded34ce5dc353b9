"""``TriggerService`` on in-memory fakes: register (routes, failures), get, cancel, list."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.app.support import (
    CALLBACK,
    NOW_MS,
    SETTINGS,
    Env,
    RecordingStore,
    make_env,
    request,
)
from trigger_service.adapters.memory.dns import StaticResolver
from trigger_service.app.registration import RegisterRequest
from trigger_service.app.schedules import TimeRequest
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.settings import Settings
from trigger_service.core.errors import (
    CallbackNotAllowed,
    NotCancellable,
    NotFound,
    QueueError,
    StoreError,
)
from trigger_service.core.model import (
    Route,
    Status,
    Trigger,
    is_trigger_id,
    new_trigger_id,
    shard_of,
)
from trigger_service.core.ports.values import OutgoingMessage
from trigger_service.core.time.timing import DAY_MS

DIRECT_MAX_MS = SETTINGS.direct_max_delay_s * 1000
LEAD_S = SETTINGS.sqs.enqueue_lead_s


async def register(env: Env, delay_ms: int, caller: str = "orders") -> Trigger:
    result = await env.service.register_planned(caller, request(env, delay_ms), None, "h")
    await env.service.drain()  # the SQS send runs after the answer
    return env.store.triggers[result.trigger_id]


# --- register ---------------------------------------------------------------------------
async def test_direct_registration_writes_the_row_and_sends_one_message() -> None:
    env = make_env()
    result = await env.service.register_planned(
        "orders", request(env, 600_000, payload={"a": 1}), None, "h")
    await env.service.drain()
    assert result.replayed is False and result.fire_at_ms == NOW_MS + 600_000
    t = env.store.triggers[result.trigger_id]
    assert t.status is Status.PENDING and t.route is Route.DIRECT
    assert env.queue.sent == [OutgoingMessage(t.trigger_id, NOW_MS + 600_000, 600 - LEAD_S,
                                              NOW_MS + 600_000, t.shard)]
    assert env.metrics.snapshot() == {"triggers_registered_total": 1}


async def test_sweep_registration_writes_the_row_and_sends_nothing() -> None:
    env = make_env()
    t = await register(env, 2 * DAY_MS)
    assert t.route is Route.SWEEP and t.status is Status.PENDING
    assert env.queue.sent == [] and env.queue.calls == {}
    assert env.metrics.snapshot() == {"triggers_registered_total": 1}


@pytest.mark.parametrize(
    ("settings", "delay_ms", "route"),
    [
        (SETTINGS, DIRECT_MAX_MS, Route.DIRECT),
        (SETTINGS, DIRECT_MAX_MS + 1, Route.SWEEP),
        (dataclasses.replace(SETTINGS, direct_max_delay_s=300), 300_000, Route.DIRECT),
        (dataclasses.replace(SETTINGS, direct_max_delay_s=300), 300_001, Route.SWEEP),
    ],
)
async def test_route_boundary_is_inclusive_at_direct_max_delay(
    settings: Settings, delay_ms: int, route: Route
) -> None:
    env = make_env(settings)
    t = await register(env, delay_ms)
    assert t.route is route
    assert len(env.queue.sent) == (1 if route is Route.DIRECT else 0)


async def test_fire_time_now_is_sent_without_delay() -> None:
    env = make_env()
    t = await register(env, 0)
    assert t.route is Route.DIRECT
    assert env.queue.sent == [OutgoingMessage(t.trigger_id, NOW_MS, 0, NOW_MS, t.shard)]


async def test_created_row_carries_the_request() -> None:
    env = make_env()
    result = await env.service.register_planned(
        "orders", request(env, 5_000, payload=[1, "é"]), "key-1", "hash-1")
    t = env.store.triggers[result.trigger_id]
    assert is_trigger_id(t.trigger_id)
    assert (t.caller, t.callback_url, t.payload_json) == ("orders", CALLBACK, '[1, "\\u00e9"]')
    assert (t.fire_at_ms, t.created_at_ms, t.attempts) == (NOW_MS + 5_000, NOW_MS, 0)
    assert t.shard == shard_of(t.trigger_id, SETTINGS.shards)
    assert t.idem_key == "key-1"


async def test_index_entries_outlive_the_row_retention() -> None:
    env = make_env()
    t = await register(env, 10 * DAY_MS)
    ttl_s = env.store.index_ttls[t.trigger_id]
    assert ttl_s == env.service.index_ttl_s(t)
    assert ttl_s > 10 * 86_400 + SETTINGS.retention_s + sum(SETTINGS.dispatch.retry_backoff_s)


async def test_queue_error_still_registers_and_counts_the_failure() -> None:
    env = make_env()
    env.queue.failures["send"] = QueueError("sqs down")
    result = await env.service.register_planned("orders", request(env, 1_000), None, "h")
    await env.service.drain()  # the failure is counted, not raised
    assert result.replayed is False
    assert env.store.triggers[result.trigger_id].status is Status.PENDING
    assert env.queue.sent == [] and env.queue.calls["send"] == 1
    assert env.metrics.snapshot() == {"enqueue_failures_total": 1,
                                      "triggers_registered_total": 1}


async def test_store_error_on_create_is_raised_and_nothing_is_sent() -> None:
    env = make_env()
    env.store.failures["create"] = StoreError("cassandra down")
    with pytest.raises(StoreError):
        await env.service.register_planned("orders", request(env, 1_000), None, "h")
    assert env.store.triggers == {} and env.queue.sent == []
    assert env.metrics.snapshot() == {}


# --- get --------------------------------------------------------------------------------
async def test_get_returns_the_callers_own_trigger() -> None:
    env = make_env()
    t = await register(env, 1_000)
    assert await env.service.get("orders", t.trigger_id) == t


async def test_get_hides_another_callers_trigger_like_an_unknown_one() -> None:
    env = make_env()
    t = await register(env, 1_000)
    with pytest.raises(NotFound) as other:
        await env.service.get("billing", t.trigger_id)
    with pytest.raises(NotFound) as unknown:
        await env.service.get("orders", new_trigger_id(NOW_MS))
    assert other.value.status == unknown.value.status == 404
    assert set(other.value.to_json()) == set(unknown.value.to_json()) == {"error", "message"}


@pytest.mark.parametrize("bad_id", ["not-an-id", "trg_01hf7yat3v8c3jv1rrethbjnrb"])
async def test_get_malformed_id_is_not_found_without_reading_the_store(bad_id: str) -> None:
    env = make_env()
    with pytest.raises(NotFound):
        await env.service.get("orders", bad_id)
    assert "get" not in env.store.calls


# --- cancel -----------------------------------------------------------------------------
async def test_cancel_pending_is_cancelled_and_idempotent() -> None:
    env = make_env()
    t = await register(env, 2 * DAY_MS)
    env.store.triggers[t.trigger_id] = replace(t, status=Status.PENDING, attempts=1,
                                                     next_attempt_at_ms=NOW_MS + 60_000)
    first = await env.service.cancel("orders", t.trigger_id)
    assert first.status is Status.CANCELLED and first.next_attempt_at_ms is None
    assert env.store.triggers[t.trigger_id] == first
    assert env.store.cas_ttls == [SETTINGS.retention_s]  # terminal: the row's TTL is set
    again = await env.service.cancel("orders", t.trigger_id)
    assert again == first and env.store.calls["compare_and_set"] == 1


@pytest.mark.parametrize("status", [Status.IN_FLIGHT, Status.FIRED, Status.FAILED])
async def test_cancel_in_flight_or_finished_is_not_cancellable(status: Status) -> None:
    env = make_env()
    t = await register(env, 1_000)
    moved = replace(t, status=status, attempts=1)
    env.store.triggers[t.trigger_id] = moved
    with pytest.raises(NotCancellable) as e:
        await env.service.cancel("orders", t.trigger_id)
    assert e.value.status == 409 and e.value.extra == {"status": status.value}
    assert e.value.to_json()["status"] == status.value
    assert env.store.triggers[t.trigger_id] == moved
    assert "compare_and_set" not in env.store.calls


async def test_cancel_another_callers_trigger_is_not_found_and_changes_nothing() -> None:
    env = make_env()
    t = await register(env, 1_000)
    with pytest.raises(NotFound):
        await env.service.cancel("billing", t.trigger_id)
    assert env.store.triggers[t.trigger_id].status is Status.PENDING


class ClaimedDuringCancel(RecordingStore):
    """The dispatcher claims the trigger between the cancel's read and its write."""

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None, patient: bool = False
    ) -> bool:
        self.triggers[old.trigger_id] = replace(old, status=Status.IN_FLIGHT, claim_id="c1")
        return await super().compare_and_set(old, new, ttl_s=ttl_s, patient=patient)


async def test_cancel_that_loses_to_a_claim_reports_in_flight() -> None:
    env = make_env(store=ClaimedDuringCancel())
    t = await register(env, 1_000)
    with pytest.raises(NotCancellable) as e:
        await env.service.cancel("orders", t.trigger_id)
    assert e.value.extra == {"status": "IN_FLIGHT"}
    assert env.store.triggers[t.trigger_id].status is Status.IN_FLIGHT
    assert env.store.calls["compare_and_set"] == 1


class NeverApplies(RecordingStore):
    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None, patient: bool = False
    ) -> bool:
        await super().compare_and_set(old, old, ttl_s=ttl_s)  # counts the call, changes nothing
        return False


async def test_cancel_gives_up_after_bounded_rounds_of_lost_writes() -> None:
    env = make_env(store=NeverApplies())
    t = await register(env, 1_000)
    with pytest.raises(NotCancellable) as e:
        await env.service.cancel("orders", t.trigger_id)
    assert e.value.extra == {"status": "PENDING"}
    assert env.store.calls["compare_and_set"] == 5
    assert env.store.triggers[t.trigger_id].status is Status.PENDING


# --- list -------------------------------------------------------------------------------
async def register_delays(env: Env, delays_s: list[int], step_ms: int = 0) -> dict[int, str]:
    """Register one trigger per delay (in the given order, ``step_ms`` apart); delay →
    trigger id."""
    ids = {}
    for delay_s in delays_s:
        ids[delay_s] = (await register(env, delay_s * 1000)).trigger_id
        env.clock.advance_ms(step_ms)
    return ids


async def test_list_is_newest_created_first_and_pending_by_fire_time() -> None:
    env = make_env()
    ids = await register_delays(env, [500, 100, 40 * 86_400, 300, 200], step_ms=1)
    page = await env.service.list_triggers("orders", status=None, limit=50, cursor=None)
    assert [t.trigger_id for t in page.triggers] == list(reversed(ids.values()))
    assert page.next_cursor is None
    page = await env.service.list_triggers("orders", status=Status.PENDING, limit=50,
                                           cursor=None)
    assert [t.trigger_id for t in page.triggers] == [ids[d] for d in sorted(ids)]


async def test_list_filters_by_status() -> None:
    env = make_env()
    ids = await register_delays(env, [500, 100, 300])
    await env.service.cancel("orders", ids[300])
    page = await env.service.list_triggers("orders", status=Status.CANCELLED, limit=50,
                                           cursor=None)
    assert [t.trigger_id for t in page.triggers] == [ids[300]]
    page = await env.service.list_triggers("orders", status=Status.PENDING, limit=50,
                                           cursor=None)
    assert [t.trigger_id for t in page.triggers] == [ids[100], ids[500]]


async def test_list_pages_cover_everything_once_in_order() -> None:
    env = make_env()
    ids = await register_delays(env, [70, 10, 60, 20, 50, 30, 40 * 86_400], step_ms=1)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = await env.service.list_triggers("orders", status=None, limit=2, cursor=cursor)
        assert 1 <= len(page.triggers) <= 2
        seen += [t.trigger_id for t in page.triggers]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == list(reversed(ids.values()))


async def test_list_shows_only_the_callers_triggers() -> None:
    env = make_env()
    mine = await register(env, 1_000, caller="orders")
    await register(env, 2_000, caller="billing")
    page = await env.service.list_triggers("orders", status=None, limit=50, cursor=None)
    assert [t.trigger_id for t in page.triggers] == [mine.trigger_id]


async def test_list_still_shows_triggers_that_fired_within_the_retention() -> None:
    env = make_env()
    t = await register(env, 1_000)
    env.clock.advance_ms((SETTINGS.retention_days - 1) * DAY_MS)  # into the next fire month
    page = await env.service.list_triggers("orders", status=None, limit=50, cursor=None)
    assert [x.trigger_id for x in page.triggers] == [t.trigger_id]


WIDE = CallerRegistry.from_mapping({"callers": {"wide": {
    "token_sha256": hash_token("t"), "callback_prefixes": ["https://"]}}}).by_name("wide")


async def test_accept_plans_the_request_and_vets_its_callback_host() -> None:
    """The use case owns planning and the callback check (the HTTP layer parses shapes)."""
    resolver = StaticResolver({"inside.example": ["10.0.0.7"], "public.example": ["8.8.8.8"]})
    env = make_env(resolver=resolver)
    assert WIDE is not None
    past = TimeRequest(at_ms=NOW_MS - 5_000)
    new = await env.service.accept(WIDE, RegisterRequest(
        "https://public.example/cb", "null", past, NOW_MS))
    assert new.fire_at_ms == NOW_MS and new.received_at_ms == NOW_MS  # a past time fires now
    with pytest.raises(CallbackNotAllowed):
        await env.service.accept(WIDE, RegisterRequest(
            "https://inside.example/cb", "null", past, NOW_MS))
    assert resolver.asked == ["public.example", "inside.example"]


def test_the_http_layer_neither_plans_a_registration_nor_resolves_its_callback() -> None:
    http = Path(__file__).parents[3] / "trigger_service" / "http"
    for path in http.rglob("*.py"):
        assert "vet_callback_host" not in path.read_text(), path
    assert "app.schedules" not in (http / "parsing.py").read_text()
