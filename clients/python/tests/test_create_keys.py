"""An unknown outcome: ``503 outcome_unknown`` is ``OutcomeUnknown`` naming the
trigger, retried with the create's one key; ``triggerctl create`` always sends a key and,
when the outcome stays unknown, prints it so the user's retry reuses it."""

from __future__ import annotations

import asyncio
from functools import partial

import httpx
import pytest
from typer.testing import CliRunner

from mock_api import CREATED, Script, error
from trigger_client import (
    AsyncTriggerClient,
    BatchItemResult,
    OutcomeUnknown,
    RetryPolicy,
    TriggerClient,
    TriggerRequest,
)
from trigger_client.cli import common
from trigger_client.cli.main import app

TID = CREATED["triggerId"]
POLICY = RetryPolicy(max_attempts=3, base_s=0.01, max_backoff_s=0.05)


def unknown() -> httpx.Response:
    return error(503, "outcome_unknown", "outcome unknown: retry with the same key",
                 triggerId=TID)


def keys(script: Script) -> list[str]:
    return [r.headers["Idempotency-Key"] for r in script.requests]


def test_outcome_unknown_is_retried_with_the_one_key_then_names_the_trigger(
        script: Script) -> None:
    script.answers = [unknown()]
    c = TriggerClient("http://api", "tok", retry=POLICY, transport=script.transport,
                      sleep=lambda _s: None)
    with pytest.raises(OutcomeUnknown) as caught:
        c.triggers.create(callback_url="http://x/cb", delay_s=5)
    assert len(script.requests) == 3 and len(set(keys(script))) == 1
    assert caught.value.trigger_id == TID and caught.value.error == "outcome_unknown"


def test_the_async_client_settles_an_unknown_outcome_by_its_retry(script: Script) -> None:
    script.answers = [unknown(), httpx.Response(201, json=CREATED)]

    async def run() -> str:
        async def no_sleep(_s: float) -> None:
            return None
        async with AsyncTriggerClient("http://api", "tok", retry=POLICY,
                                      transport=script.transport, sleep=no_sleep) as c:
            created = await c.triggers.create(callback_url="http://x/cb", delay_s=5)
        return created.trigger_id

    assert asyncio.run(run()) == TID
    assert len(script.requests) == 2 and len(set(keys(script))) == 1
    assert keys(script)[0].startswith("sdk-")


def create(script: Script, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(common, "TriggerClient", partial(TriggerClient, sleep=lambda _s: None))
    argv = ["--api-url", "http://api", "--token", "tok", "create", "--in", "1h",
            "--url", "http://x/cb", *args]
    result = CliRunner().invoke(app, argv, obj=script.transport)
    return result.exit_code, result.stderr


def test_triggerctl_always_sends_a_key_and_prints_it_when_the_outcome_is_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ok = Script([httpx.Response(201, json=CREATED)])
    assert create(ok, monkeypatch)[0] == 0
    assert keys(ok)[0].startswith("sdk-")

    lost = Script([unknown()])
    code, stderr = create(lost, monkeypatch)
    key = keys(lost)[0]
    assert code == common.EXIT_API_ERROR and set(keys(lost)) == {key}
    assert f"--idempotency-key {key}" in stderr
    again = Script([httpx.Response(201, json=CREATED)])  # the user's retry with it
    assert create(again, monkeypatch, "--idempotency-key", key)[0] == 0
    assert keys(again) == [key]


def test_create_batch_keys_every_item_and_keeps_the_keys_over_a_retry(script: Script) -> None:
    items = {"items": [{"index": 0, "status": 201, "triggerId": TID,
                        "fireAt": CREATED["fireAt"], "nextFireAt": CREATED["fireAt"]},
                       {"index": 1, "status": 422, "error": "idempotency_key_reused",
                        "message": "m"}]}
    script.answers = [error(503, "dependency_unavailable"), httpx.Response(200, json=items)]
    c = TriggerClient("http://api", "tok", retry=POLICY, transport=script.transport,
                      sleep=lambda _s: None)
    req = TriggerRequest(callback_url="http://x/cb", delay_s=5)
    results = c.triggers.create_batch([req, req], idempotency_keys=["mine", None])
    first, second = script.bodies()
    assert first == second and first["items"][0]["idempotencyKey"] == "mine"
    assert first["items"][1]["idempotencyKey"].startswith("sdk-")
    assert [(r.index, r.status, r.ok) for r in results] == [(0, 201, True), (1, 422, False)]
    assert results[0].trigger_id == TID and results[1].error == "idempotency_key_reused"
    with pytest.raises(ValueError):
        c.triggers.create_batch([req] * 1001)
    with pytest.raises(ValueError):
        c.triggers.create_batch([req], idempotency_keys=["a", "b"])


def test_the_async_create_batch_answers_per_item(script: Script) -> None:
    items = {"items": [{"index": 0, "status": 200, "triggerId": TID, "replayed": True,
                        "fireAt": CREATED["fireAt"], "nextFireAt": CREATED["fireAt"]}]}
    script.answers = [httpx.Response(200, json=items)]

    async def go() -> list[BatchItemResult]:
        async with AsyncTriggerClient("http://api", "tok", transport=script.transport) as c:
            return await c.triggers.create_batch([TriggerRequest(callback_url="http://x/cb",
                                                                 delay_s=5)])

    [result] = asyncio.run(go())
    assert result.replayed and result.ok and result.fire_at is not None
