"""Events to the caller end to end on the real stack: a subscription made through the API
(Cassandra), a dispatcher that dead-letters a trigger, its event on the events queue (SQS),
and the event sender's signed POST to the receiver, verified with the SDK's receiver; and
the SDK's and triggerctl's subscriptions."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.conftest import SIGNING_SECRETS, Stack
from tests.integration.test_cli import cli, cli_json
from tests.integration.test_sdk import base_url
from trigger_client import AsyncTriggerClient, InvalidRequest, NotFound, TriggerClient
from trigger_client.receiver import verify_event
from trigger_client.subscriptions import EventSubscription

pytestmark = pytest.mark.integration


async def subscribe(stack: Stack, name: str, *events: str) -> None:
    resp = await stack.client.put(f"/v1/event-subscriptions/{name}", headers=stack.auth(),
                                  json={"url": stack.receiver.base_url + "events/" + name,
                                        "events": list(events)})
    assert resp.status == 201, await resp.text()


async def test_a_dead_lettered_trigger_is_announced_signed_and_fired_only_when_asked(
        stack: Stack) -> None:
    await subscribe(stack, "failures", "trigger.dead_lettered")
    await subscribe(stack, "fired", "trigger.fired")
    await stack.start_dispatcher(max_attempts=1, events=True)
    status, body, _ = await stack.post(stack.body(delaySeconds=0))
    assert status == 201, body
    dead_id = body["triggerId"]
    stack.receiver.script[dead_id] = [500]
    await stack.wait_status(dead_id, "FAILED", timeout_s=20)
    status, body, _ = await stack.post(stack.body(delaySeconds=0))
    fired_id = body["triggerId"]
    await stack.wait_status(fired_id, "FIRED", timeout_s=20)
    assert await stack.receiver.wait_for(lambda: len(stack.receiver.events()) >= 2, 30)
    events = {}
    for arrival in stack.receiver.events():
        event = verify_event(SIGNING_SECRETS, arrival.headers, arrival.raw)
        assert event.event_id == arrival.headers["webhook-id"]
        events[event.type] = event
    # Each event once, to the one subscription that lists it: trigger.fired only to "fired".
    assert len(stack.receiver.events()) == 2 and set(events) == {
        "trigger.dead_lettered", "trigger.fired"}
    dead = events["trigger.dead_lettered"]
    assert (dead.data["triggerId"], dead.data["occurrenceId"], dead.data["reason"],
            dead.data["attempts"]) == (dead_id, f"{dead_id}.1", "max_attempts", 1)
    assert events["trigger.fired"].data["triggerId"] == fired_id
    assert dead.event_id != events["trigger.fired"].event_id
    # Nothing failed: the failures listing is empty.
    resp = await stack.client.get("/v1/event-subscriptions/failures/failures",
                                  headers=stack.auth())
    assert resp.status == 200 and await resp.json() == {"items": []}


async def test_the_sdk_and_triggerctl_put_list_and_delete(stack: Stack) -> None:
    url = stack.receiver.base_url + "events"
    async with AsyncTriggerClient(base_url(stack), stack.token) as sdk:
        made = await sdk.subscriptions.put("alerts", url, ["endpoint.disabled"])
        assert made == EventSubscription("alerts", url, ("endpoint.disabled",))
        sync = TriggerClient(base_url(stack), stack.token)
        try:
            assert await asyncio.to_thread(sync.subscriptions.list) == [made]
            assert await asyncio.to_thread(sync.subscriptions.failures, "alerts") == []
        finally:
            await asyncio.to_thread(sync.close)
        with pytest.raises(InvalidRequest):
            await sdk.subscriptions.put("alerts", url, ["trigger.exploded"])
        code, text = await cli(stack, "subscriptions", "put", "fires", url, "-e",
                               "trigger.fired", "-e", "series.finished")
        assert code == 0 and "series.finished, trigger.fired" in text, text
        listed = await cli_json(stack, "subscriptions", "list")
        assert [s["name"] for s in listed["items"]] == ["alerts", "fires"]
        code, text = await cli(stack, "subscriptions", "delete", "fires")
        assert code == 0 and "fires deleted" in text, text
        assert (await sdk.subscriptions.delete("alerts")).deleted
        assert await sdk.subscriptions.list() == []
        with pytest.raises(NotFound):
            await sdk.subscriptions.delete("alerts")
