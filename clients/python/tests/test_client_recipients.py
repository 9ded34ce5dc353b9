"""Recipients in the SDK (sync and async) and ``triggerctl recipients``: the requests each
call makes, the answers' models, the paging iterator, a trigger naming a recipient."""

from __future__ import annotations

import httpx
from typer.testing import CliRunner

from mock_api import CREATED, Script
from trigger_client import AsyncTriggerClient, Recipient, TriggerClient
from trigger_client.cli.main import app

ADA = {"recipientId": "ada", "timeZone": "Asia/Tokyo", "quietHours": None,
       "email": None, "phone": "+15551234567", "pushTokens": None, "inbox": None,
       "channels": ["sms"], "locale": "ja-JP", "telegram": None}


def test_put_get_delete_and_list(script: Script) -> None:
    script.answers = [httpx.Response(201, json=ADA), httpx.Response(200, json=ADA),
                      httpx.Response(200, json={"recipientId": "ada", "deleted": True,
                                                "triggersFailed": 2}),
                      httpx.Response(200, json={"items": [ADA], "nextAfter": "ada"}),
                      httpx.Response(200, json={"items": [], "nextAfter": None})]
    c = TriggerClient("http://api", "t", transport=script.transport)
    got = c.recipients.put(Recipient("ada", "Asia/Tokyo", phone="+15551234567",
                                     channels=("sms",), locale="ja-JP"))
    assert got.phone == "+15551234567" and got.channels == ("sms",)
    assert c.recipients.get("ada").time_zone == "Asia/Tokyo"
    assert c.recipients.delete("ada").triggers_failed == 2
    assert [p.recipient_id for p in c.recipients.list(page_size=1)] == ["ada"]
    methods = [(r.method, r.url.path) for r in script.requests]
    assert methods[:3] == [("PUT", "/v1/recipients/ada"), ("GET", "/v1/recipients/ada"),
                           ("DELETE", "/v1/recipients/ada")]
    assert script.bodies()[0] == {"timeZone": "Asia/Tokyo", "phone": "+15551234567",
                                  "locale": "ja-JP", "channels": ["sms"]}
    assert script.requests[4].url.params["after"] == "ada"


async def test_async_recipients_and_a_trigger_naming_one(script: Script) -> None:
    script.answers = [httpx.Response(200, json=ADA), httpx.Response(201, json=CREATED)]
    async with AsyncTriggerClient("http://api", "t", transport=script.transport) as c:
        assert (await c.recipients.get("ada")).locale == "ja-JP"
        await c.triggers.create(recipient="ada", time_zone="recipient", when="every day at 9am",
                                channels="preferred", message={"text": "Standup"})
    assert script.bodies()[1] == {"recipient": "ada", "timeZone": "recipient",
                                  "when": "every day at 9am", "channels": "preferred",
                                  "message": {"text": "Standup"}}


def test_triggerctl_recipients_put(script: Script) -> None:
    script.answers = [httpx.Response(201, json=ADA)]
    result = CliRunner().invoke(app, [
        "--api-url", "http://api", "--token", "tok", "recipients", "put", "ada", "--tz",
        "Asia/Tokyo", "--phone", "+15551234567", "--channels", "sms"], obj=script.transport)
    assert result.exit_code == 0, result.output
    assert "ada" in result.stdout and "Asia/Tokyo" in result.stdout
    assert script.bodies() == [{"timeZone": "Asia/Tokyo", "phone": "+15551234567",
                                "channels": ["sms"]}]


def test_a_telegram_chat_round_trips_in_the_sdk_and_triggerctl(script: Script) -> None:
    bot = {**ADA, "telegram": -1001234567890, "channels": ["telegram", "sms"]}
    script.answers = [httpx.Response(200, json=bot), httpx.Response(201, json=bot),
                      httpx.Response(201, json={**bot, "telegram": "@ada_reminders"})]
    c = TriggerClient("http://api", "t", transport=script.transport)
    got = c.recipients.put(Recipient("ada", "Asia/Tokyo", channels=("telegram", "sms"),
                                     telegram=-1001234567890))
    assert got.telegram == -1001234567890 and got.channels == ("telegram", "sms")
    assert script.bodies()[0] == {"timeZone": "Asia/Tokyo", "channels": ["telegram", "sms"],
                                  "telegram": -1001234567890}
    for chat, sent in (("-1001234567890", -1001234567890), ("@ada_reminders", "@ada_reminders")):
        result = CliRunner().invoke(app, [
            "--api-url", "http://api", "--token", "tok", "recipients", "put", "ada", "--tz",
            "Asia/Tokyo", "--telegram", chat], obj=script.transport)
        assert result.exit_code == 0, result.output
        assert script.bodies()[-1] == {"timeZone": "Asia/Tokyo", "telegram": sent}
    assert "telegram @ada_reminders" in result.stdout
