"""The inbox stream: events become InboxMessages; the async stream reconnects with
Last-Event-ID when the server ends it; an error answer ends it with the error."""

from __future__ import annotations

import json

import httpx
import pytest

from mock_api import Script, error
from trigger_client import AsyncTriggerClient, Forbidden, TriggerClient


def message(n: int) -> dict[str, object]:
    return {"messageId": f"msg_{n}", "triggerId": "trg_1", "occurrenceId": "trg_1.1",
            "title": f"t{n}", "body": "b", "data": {"ackUrl": "http://a"},
            "createdAt": "2026-12-01T14:00:00.000Z", "readAt": None}


def events(*ns: int) -> httpx.Response:
    text = ": ping\n\n" + "".join(f"id: msg_{n}\ndata: {json.dumps(message(n))}\n\n"
                                  for n in ns)
    return httpx.Response(200, content=text.encode(),
                          headers={"Content-Type": "text/event-stream"})


async def test_the_async_stream_reconnects_from_the_last_id(script: Script) -> None:
    script.answers = [events(1, 2), events(3)]
    sleeps: list[float] = []

    async def sleep(s: float) -> None:
        sleeps.append(s)

    async with AsyncTriggerClient("http://api", "t", transport=script.transport,
                                  sleep=sleep) as c:
        stream = c.inbox.stream("ada", reconnect_delay_s=2)
        got = [(await anext(stream)).message_id for _ in range(3)]
        await stream.aclose()
    assert got == ["msg_1", "msg_2", "msg_3"] and sleeps == [2]
    assert [r.headers.get("Last-Event-ID") for r in script.requests] == [None, "msg_2"]
    assert script.requests[0].url.path == "/v1/inbox/ada/stream"


async def test_an_error_answer_ends_the_async_stream(script: Script) -> None:
    script.answers = [error(403, "forbidden")]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        with pytest.raises(Forbidden):
            await anext(c.inbox.stream("ada"))


def test_the_sync_stream_yields_messages_until_the_server_ends_it(script: Script) -> None:
    script.answers = [events(1, 2)]
    c = TriggerClient("http://api", "t", transport=script.transport)
    got = list(c.inbox.stream("ada", last_event_id="msg_0"))
    assert [m.title for m in got] == ["t1", "t2"] and got[0].data == {"ackUrl": "http://a"}
    assert script.requests[0].headers["Last-Event-ID"] == "msg_0"
