"""``flowControl`` (flow control per destination) in the SDK, sync and async, on MockTransport:
sent on create and patch (null removes it), read back on a trigger."""

from __future__ import annotations

import httpx

from mock_api import CREATED, Script, trigger_json
from trigger_client import AsyncTriggerClient, FlowControl, TriggerClient

FLOW = FlowControl("partner-a", 0.5, 3)
FLOW_JSON = {"key": "partner-a", "ratePerSecond": 0.5, "parallelism": 3}


def test_create_sends_it_and_get_reads_it(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED),
                      httpx.Response(200, json=trigger_json(1, flowControl=FLOW_JSON))]
    c = TriggerClient("http://api", "t", transport=script.transport)
    c.triggers.create(callback_url="http://x/cb", delay_s=5, flow_control=FLOW)
    assert script.bodies()[0]["flowControl"] == FLOW_JSON
    assert c.triggers.get(trigger_json(1)["triggerId"]).flow_control == FLOW


def test_one_bound_alone_is_sent_without_the_other(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED)]
    c = TriggerClient("http://api", "t", transport=script.transport)
    c.triggers.create(callback_url="http://x/cb", delay_s=5,
                      flow_control=FlowControl("k", parallelism=2))
    assert script.bodies()[0]["flowControl"] == {"key": "k", "parallelism": 2}


async def test_async_create_and_patch(script: Script) -> None:
    script.answers = [httpx.Response(201, json=CREATED),
                      httpx.Response(200, json=trigger_json(1, flowControl=None))]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        await c.triggers.create(callback_url="http://x/cb", delay_s=5, flow_control=FLOW)
        t = await c.triggers.patch(trigger_json(1)["triggerId"], flow_control=None)
    assert script.bodies() == [{"callbackUrl": "http://x/cb", "delaySeconds": 5,
                                "flowControl": FLOW_JSON}, {"flowControl": None}]
    assert t.flow_control is None
