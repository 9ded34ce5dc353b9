"""Recipient profiles and a recipient's channels, pure (core/recipient_profiles.py,
core/notify/plan.py): parsing, storage round trips, and the send-time address."""

from __future__ import annotations

from datetime import time

import pytest

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.notify.channels import (
    ChannelType,
    EmailSpec,
    InboxSpec,
    SmsSpec,
    TelegramSpec,
)
from trigger_service.core.notify.plan import parse_plan, plan_from_json, plan_to_json
from trigger_service.core.recipient_profiles import (
    parse_profile,
    profile_from_json,
    profile_to_json,
    profile_view,
    resolve_spec,
)

BODY = {"timeZone": "America/New_York", "quietHours": {"start": "22:00", "end": "07:00"},
        "email": ["ada@example.com"], "phone": "+15551234567", "pushTokens": ["t1", "t2"],
        "channels": ["push", "sms", "email"], "locale": "en-US"}


def test_a_profile_parses_round_trips_and_its_quiet_hours_follow_its_zone() -> None:
    p = parse_profile("ada", BODY, 5)
    assert p.preference == (ChannelType.PUSH, ChannelType.SMS, ChannelType.EMAIL)
    assert profile_from_json("ada", profile_to_json(p)) == p
    quiet = p.effective_quiet_hours()
    assert quiet is not None and quiet.time_zone == "America/New_York"
    assert quiet.start == time(22, 0)
    assert profile_view(p)["quietHours"] == {"start": "22:00", "end": "07:00"}


@pytest.mark.parametrize(("body", "field"), [
    ({}, "timeZone"), ({"timeZone": "Mars/Olympus"}, "timeZone"),
    ({"timeZone": "UTC", "phone": "555"}, "phone"),
    ({"timeZone": "UTC", "email": "not-an-address"}, "email"),
    ({"timeZone": "UTC", "channels": ["sms", "sms"]}, "channels"),
    ({"timeZone": "UTC", "channels": ["fax"]}, "channels"),
    ({"timeZone": "UTC", "locale": "english please"}, "locale"),
    ({"timeZone": "UTC", "nickname": "A"}, "nickname")])
def test_a_bad_profile_names_its_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_profile("ada", body, 0)
    assert e.value.to_json()["field"] == field


def test_a_bad_recipient_id_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        parse_profile("no spaces", {"timeZone": "UTC"}, 0)


def test_channels_by_type_alone_take_the_message_and_round_trip() -> None:
    plan = parse_plan({"recipient": "ada", "message": {"title": "Standup", "text": "Now"},
                       "channels": [{"type": "sms"}, {"type": "email"},
                                    {"type": "sms", "to": "+15550001111", "text": "own"}]})
    assert plan is not None and plan.addressless
    assert plan.channels == (SmsSpec("", "Now"), EmailSpec((), "Standup", "Now"),
                             SmsSpec("+15550001111", "own"))
    assert plan_from_json(plan_to_json(plan)) == plan


@pytest.mark.parametrize("body", [
    {"channels": [{"type": "sms", "text": "x"}]},  # no recipient: the address is required
    {"recipient": "ada", "channels": [{"type": "sms"}]},  # no text, no message
    {"recipient": "ada", "channels": "preferred"},  # preferred needs a message
    {"channels": "preferred", "message": {"text": "x"}},  # and a recipient
    {"channels": [{"type": "sms", "to": "+15550001111", "text": "x"}],
     "message": {"text": "x"}}])  # a message only with a recipient
def test_what_a_recipient_plan_refuses(body: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        parse_plan(body)


def test_resolve_keeps_an_own_address_and_names_a_missing_one() -> None:
    p = parse_profile("ada", {"timeZone": "UTC", "phone": "+15551234567"}, 0)
    assert resolve_spec(p, SmsSpec("", "hi"), preferred=False) == SmsSpec("+15551234567", "hi")
    assert resolve_spec(p, SmsSpec("+15550001111", "hi"), preferred=False) == \
        SmsSpec("+15550001111", "hi")
    missing = resolve_spec(p, EmailSpec((), "s", "t"), preferred=False)
    assert isinstance(missing, str) and missing.startswith("recipient_no_address")
    # An inbox always has an address: the profile's id.
    assert resolve_spec(p, InboxSpec("", "t", "b"), preferred=False) == InboxSpec("ada", "t", "b")


def test_a_telegram_chat_in_a_profile_is_the_channels_address_at_send_time() -> None:
    p = parse_profile("ada", {**BODY, "telegram": -1001234567890,
                              "channels": ["telegram", "sms"]}, 5)
    assert p.telegram == -1001234567890 and p.preferred() is ChannelType.TELEGRAM
    assert profile_from_json("ada", profile_to_json(p)) == p
    assert profile_view(p)["telegram"] == -1001234567890
    # A profile stored before the field existed reads back without a chat.
    old = profile_to_json(parse_profile("bob", BODY, 5)).replace(',"telegram":null', "")
    assert '"telegram"' not in old
    assert profile_from_json("bob", old).telegram is None
    plan = parse_plan({"recipient": "ada", "channels": [{"type": "telegram"}],
                       "message": {"text": "Pills"}})
    assert plan is not None and plan_from_json(plan_to_json(plan)) == plan
    (spec,) = plan.channels
    assert resolve_spec(p, spec, preferred=False) == TelegramSpec(-1001234567890, "Pills")
    assert resolve_spec(p, SmsSpec("", "Pills"), preferred=True) == TelegramSpec(
        -1001234567890, "Pills")
    own = TelegramSpec("@ada_channel", "Pills", "HTML")
    assert resolve_spec(p, own, preferred=False) == own
    without = parse_profile("bob", BODY, 5)
    assert not without.has(ChannelType.TELEGRAM)
    assert str(resolve_spec(without, spec, preferred=False)).startswith("recipient_no_address")
    with pytest.raises(InvalidRequest, match="telegram"):
        parse_profile("ada", {**BODY, "telegram": "no-at-sign"}, 5)
