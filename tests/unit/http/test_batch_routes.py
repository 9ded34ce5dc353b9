"""``POST /v1/triggers/batch`` on the in-memory fakes: each item answered on its own, keys
repeated inside a batch, the rate counting items, and the request-level refusals."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fake_runtime import fake_runtime
from tests.unit.app.support import NOW_MS, make_env
from tests.unit.http.test_routes import (
    AUTH,
    BODY,
    JSON,
    OPERATOR,
    Api,
    assert_error,
    counted_parses,
    serving,
)
from trigger_service.adapters.memory.limits import MemoryPendingQuota, MemoryRateLimiter
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.app.quota import QuotaGate
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.platform.metrics import InMemoryMetrics

URL = "/v1/triggers/batch"


async def post_batch(api: Api, items: list[Any], headers: dict[str, str] | None = None
                     ) -> tuple[int, Any]:
    resp = await api.client.post(URL, data=_raw({"items": items}),
                                 headers=(headers or AUTH) | JSON)
    return resp.status, await resp.json()


def _raw(body: Any) -> io.BytesIO:
    """A large body as a stream (aiohttp's client warns about large raw bytes)."""
    return io.BytesIO(json.dumps(body).encode())


async def test_each_item_is_answered_on_its_own_in_order(api: Api) -> None:
    items: list[Any] = [
        BODY,
        BODY | {"delaySeconds": 0},
        {"payload": 1, "delaySeconds": 5},  # no callback, no channels
        "not an object",
        BODY | {"callbackUrl": "http://evil.example/x"},
        BODY | {"bogus": 1},
        BODY | {"idempotencyKey": 7},
        BODY | {"idempotencyKey": "é"},
        BODY | {"when": "tomorrow at 9am", "timeZone": "Europe/Paris", "delaySeconds": None},
    ]
    items[8] = {k: v for k, v in items[8].items() if k != "delaySeconds"}
    status, body = await post_batch(api, items)
    assert status == 200
    answers = body["items"]
    assert [a["index"] for a in answers] == list(range(len(items)))
    assert [a["status"] for a in answers] == [201, 201, 400, 400, 422, 400, 400, 400, 201]
    assert answers[2]["error"] == "invalid_request" and answers[2]["field"] == "callbackUrl"
    assert answers[4]["error"] == "callback_not_allowed"
    assert answers[5]["field"] == "bogus"
    assert answers[6]["field"] == "idempotencyKey" and answers[7]["field"] == "idempotencyKey"
    assert answers[8]["resolved"]["when"] == "tomorrow at 9am"
    created = [a["triggerId"] for a in answers if a["status"] == 201]
    assert set(created) == set(api.env.store.triggers)
    first = api.env.store.triggers[answers[0]["triggerId"]]
    assert first.fire_at_ms == NOW_MS + 600_000 and answers[0]["fireAt"].endswith("Z")
    assert {m.trigger_id for m in api.env.queue.sent} == {answers[0]["triggerId"],
                                                          answers[1]["triggerId"]}


async def test_a_repeated_key_is_one_trigger_and_another_body_under_it_is_refused(
        api: Api) -> None:
    same = BODY | {"idempotencyKey": "k-1"}
    items = [same, same | {"payload": "other"}, same, BODY | {"idempotencyKey": "k-2"}]
    status, body = await post_batch(api, items)
    answers = body["items"]
    assert status == 200
    assert [a["status"] for a in answers] == [201, 422, 200, 201]
    assert answers[1]["error"] == "idempotency_key_reused"
    assert answers[2]["replayed"] is True and answers[2]["triggerId"] == answers[0]["triggerId"]
    assert len(api.env.store.triggers) == 2
    # The key is the header's: the single endpoint replays it, and a batch replays it again.
    single = await api.client.post("/v1/triggers", json=BODY,
                                   headers=AUTH | {"Idempotency-Key": "k-1"})
    assert single.status == 201 and single.headers["Idempotent-Replayed"] == "true"
    assert (await single.json())["triggerId"] == answers[0]["triggerId"]
    _, again = await post_batch(api, [same])
    assert again["items"][0]["status"] == 200
    assert again["items"][0]["triggerId"] == answers[0]["triggerId"]


@pytest.mark.parametrize("body, field", [
    ([BODY], "body"),
    ({"items": []}, "items"),
    ({"items": BODY}, "items"),
    ({"items": [BODY] * 1001}, "items"),
    ({"items": [BODY], "more": 1}, "more"),
])
async def test_a_body_that_is_not_a_batch_is_400(api: Api, body: Any, field: str) -> None:
    resp = await api.client.post(URL, data=_raw(body), headers=AUTH | JSON)
    got = await assert_error(resp, 400, "invalid_request")
    assert got["field"] == field
    assert api.env.store.triggers == {}


async def test_a_thousand_items_fit_and_a_larger_body_is_413(api: Api) -> None:
    status, body = await post_batch(api, [BODY] * 1000)
    assert status == 200 and len(body["items"]) == 1000
    assert len(api.env.store.triggers) == 1000
    huge = [BODY | {"payload": "x" * 4000}] * 2500  # 10 MB
    resp = await api.client.post(URL, data=_raw({"items": huge}), headers=AUTH | JSON)
    await assert_error(resp, 413, "payload_too_large")
    # The other routes keep their own limit.
    resp = await api.client.post("/v1/triggers", json=BODY | {"payload": "x" * 70_000},
                                 headers=AUTH)
    await assert_error(resp, 413, "payload_too_large")


async def test_an_ops_token_may_not_create(api: Api) -> None:
    resp = await api.client.post(URL, json={"items": [BODY]}, headers=OPERATOR)
    await assert_error(resp, 403, "forbidden")


@pytest.fixture
async def limited() -> AsyncIterator[Api]:
    """Callers with a rate (3 per second, burst 5) and a quota (4 pending)."""
    callers = CallerRegistry.from_mapping({"callers": {
        "orders": {"token_sha256": hash_token("tok"), "rate_per_s": 3, "burst": 5,
                   "max_pending": 4, "callback_prefixes": ["http://127.0.0.1:9000/"]}}})
    pending = MemoryPendingQuota()
    quota = QuotaGate(pending, lambda n: getattr(callers.by_name(n), "max_pending", None),
                      InMemoryMetrics())
    env = make_env(quota=quota)
    runtime = fake_runtime(env.settings, callers, env.store, env.queue, env.cache,
                           MemoryLease(env.clock, 10_000), env.clock, env.metrics,
                           limiter=MemoryRateLimiter(env.clock), quota=pending)
    async with serving(env, runtime) as served:
        yield served


async def test_the_rate_and_the_quota_count_items_not_requests(limited: Api) -> None:
    items = [BODY | {"idempotencyKey": f"r-{i}"} for i in range(7)] + ["bad"]
    status, body = await post_batch(limited, items)
    answers = body["items"]
    assert status == 200
    # The bucket holds 5: the request's token and 4 more; the quota holds 4 of those. The
    # bad item is past the bucket: refused for the rate, never parsed.
    assert [a["status"] for a in answers] == [201] * 4 + [429] * 4
    assert answers[4]["error"] == "quota_exceeded"
    assert [a["error"] for a in answers[5:]] == ["rate_limited"] * 3
    assert all(a["retryAfter"] >= 1 for a in answers[5:])
    assert len(limited.env.store.triggers) == 4
    # The bucket is empty now: the next request is refused whole, as on any route.
    resp = await limited.client.post(URL, json={"items": [BODY]}, headers=AUTH)
    await assert_error(resp, 429, "rate_limited")
    limited.env.clock.advance_ms(1_000)
    _, replay = await post_batch(limited, items[:3])  # 3 tokens back: replays pass
    assert [a["status"] for a in replay["items"]] == [200, 200, 200]


async def test_the_rate_is_charged_before_any_item_is_parsed(
        limited: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing an item (its `when`, its RRULE) is the work the rate bounds: a thousand items
    against a bucket of 5 parse 5, an invalid item costs its token, and a batch with the
    bucket empty is refused whole before its body is read."""
    parsed = counted_parses(monkeypatch)
    when = BODY | {"when": "in 2 hours", "delaySeconds": None}
    items = [{k: v for k, v in when.items() if v is not None}] * 1_000
    status, body = await post_batch(limited, [BODY | {"bogus": 1}, *items[1:]])
    assert status == 200 and len(parsed) == 5
    answers = body["items"]
    assert [a["status"] for a in answers[:5]] == [400, 201, 201, 201, 201]
    assert {a["error"] for a in answers[5:]} == {"rate_limited"} and len(answers) == 1_000
    resp = await limited.client.post(URL, data=_raw({"items": items}), headers=AUTH | JSON)
    await assert_error(resp, 429, "rate_limited")
    limited.env.clock.advance_ms(700)  # two tokens back: the request's and one item's
    _, body = await post_batch(limited, items[:100])
    errors = [a.get("error") for a in body["items"]]
    assert errors == ["quota_exceeded"] * 2 + ["rate_limited"] * 98 and len(parsed) == 7
