"""``priority`` in the SDK, sync and async, and in ``triggerctl create``, on MockTransport:
sent on create, batch items and patch (None makes it normal), read back on a trigger."""

from __future__ import annotations

import httpx
import pytest
from typer.testing import CliRunner

from mock_api import CREATED, Script, trigger_json
from trigger_client import AsyncTriggerClient, Priority, TriggerClient, TriggerRequest
from trigger_client.cli.main import app

TID = CREATED["triggerId"]


def test_create_sends_it_and_get_reads_it(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED), httpx.Response(201, json=CREATED),
                      httpx.Response(200, json=trigger_json(1, priority="high"))]
    c = TriggerClient("http://api", "t", transport=script.transport)
    c.triggers.create(callback_url="http://x/cb", delay_s=5, priority=Priority.HIGH)
    c.triggers.create(callback_url="http://x/cb", delay_s=5, priority="low")
    assert [b["priority"] for b in script.bodies()] == ["high", "low"]
    t = c.triggers.get(trigger_json(1)["triggerId"])
    assert t.priority is Priority.HIGH and t.priority == "high"


def test_without_one_nothing_is_sent_and_a_trigger_without_one_reads_normal(
        script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED),
                      httpx.Response(200, json=trigger_json(1))]  # a server before priorities
    c = TriggerClient("http://api", "t", transport=script.transport)
    c.triggers.create(callback_url="http://x/cb", delay_s=5)
    assert "priority" not in script.bodies()[0]
    assert c.triggers.get(trigger_json(1)["triggerId"]).priority is Priority.NORMAL


def test_patch_changes_it_and_none_makes_it_normal(script: Script) -> None:
    script.answers = [httpx.Response(200, json=trigger_json(1, priority="low")),
                      httpx.Response(200, json=trigger_json(1, priority="normal"))]
    c = TriggerClient("http://api", "t", transport=script.transport)
    assert c.triggers.patch(TID, priority=Priority.LOW).priority is Priority.LOW
    assert c.triggers.patch(TID, priority=None).priority is Priority.NORMAL
    assert script.bodies() == [{"priority": "low"}, {"priority": None}]


def test_batch_items_carry_their_own(script: Script) -> None:
    items = {"items": [{"index": i, "status": 201, "triggerId": TID,
                        "fireAt": CREATED["fireAt"], "nextFireAt": CREATED["fireAt"]}
                       for i in range(3)]}
    script.answers = [httpx.Response(200, json=items)]
    c = TriggerClient("http://api", "t", transport=script.transport)
    c.triggers.create_batch([
        TriggerRequest(callback_url="http://x/cb", delay_s=5, priority=Priority.HIGH),
        TriggerRequest(callback_url="http://x/cb", delay_s=5),
        TriggerRequest(callback_url="http://x/cb", delay_s=5, priority="low")])
    sent = script.bodies()[0]["items"]
    assert [i.get("priority") for i in sent] == ["high", None, "low"]


def test_a_request_reads_it_from_an_api_body() -> None:
    req = TriggerRequest.from_json({"callbackUrl": "http://x/cb", "delaySeconds": 5,
                                    "priority": "high"})
    assert req.priority == "high" and req.to_json()["priority"] == "high"


async def test_async_create_and_patch(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED),
                      httpx.Response(200, json=trigger_json(1, priority="low"))]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        await c.triggers.create(callback_url="http://x/cb", delay_s=5, priority="high")
        t = await c.triggers.patch(TID, priority=Priority.LOW)
    assert script.bodies() == [{"callbackUrl": "http://x/cb", "delaySeconds": 5,
                                "priority": "high"}, {"priority": "low"}]
    assert t.priority is Priority.LOW


@pytest.mark.parametrize("name", ["high", "normal", "low"])
def test_triggerctl_create_sends_it(name: str) -> None:
    script = Script(answers=[httpx.Response(201, json=CREATED)])
    result = CliRunner().invoke(app, ["--api-url", "http://api", "--token", "t", "create",
                                      "--in", "1h", "--url", "http://x/cb", "--priority", name,
                                      "-o", "json"], obj=script.transport)
    assert result.exit_code == 0, result.output
    assert script.bodies()[0]["priority"] == name


def test_triggerctl_refuses_another_value_before_sending() -> None:
    script = Script(answers=[httpx.Response(201, json=CREATED)])
    result = CliRunner().invoke(app, ["--api-url", "http://api", "--token", "t", "create",
                                      "--in", "1h", "--url", "http://x/cb", "--priority",
                                      "urgent"], obj=script.transport)
    assert result.exit_code == 2 and script.requests == []
