"""Channel specs: parsing names the bad field; what is stored reads back the same."""

from __future__ import annotations

import pytest

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.notify.channels import (
    EmailSpec,
    InboxSpec,
    PushSpec,
    SmsSpec,
    parse_channels,
    spec_to_json,
)

GOOD = [
    {"type": "email", "to": ["a@example.com", "b.c+d@mail.example.org"], "subject": "Hi",
     "text": "Time to go", "html": "<p>Time</p>", "replyTo": "ops@example.com"},
    {"type": "sms", "to": "+4915112345678", "text": "Time to go"},
    {"type": "push", "token": "tok-123", "title": "T", "body": "B", "data": {"k": "v"},
     "ttlSeconds": 60},
    {"type": "inbox", "recipient": "user-42", "title": "T", "body": "B", "data": {"n": [1]}},
]


def test_every_type_parses_and_round_trips() -> None:
    specs = parse_channels(GOOD)
    assert [type(s) for s in specs] == [EmailSpec, SmsSpec, PushSpec, InboxSpec]
    assert specs[0].to == ("a@example.com", "b.c+d@mail.example.org")  # type: ignore[union-attr]
    assert [spec_to_json(s) for s in specs] == GOOD
    assert parse_channels([spec_to_json(s) for s in specs]) == specs
    single = parse_channels([{"type": "email", "to": "x@example.com", "subject": "s",
                              "text": "t"}])
    assert single[0].to == ("x@example.com",)  # type: ignore[union-attr]


@pytest.mark.parametrize(("channels", "field"), [
    ([], "channels"),
    ([GOOD[1]] * 9, "channels"),
    ("email", "channels"),
    ([{"type": "fax", "to": "1"}], "channels[0].type"),
    ([{"type": "email", "subject": "s", "text": "t"}], "channels[0].to"),
    ([{"type": "email", "to": "not-an-address", "subject": "s", "text": "t"}],
     "channels[0].to"),
    ([{"type": "email", "to": "a@b", "subject": "s", "text": "t"}], "channels[0].to"),
    ([GOOD[1], {"type": "sms", "to": "015112345678", "text": "t"}], "channels[1].to"),
    ([{"type": "sms", "to": "+4915112345678", "text": "x" * 1601}], "channels[0].text"),
    ([{"type": "push", "title": "t", "body": "b"}], "channels[0].token"),
    ([{"type": "push", "token": "t", "title": "t", "body": "b", "data": {"n": 1}}],
     "channels[0].data"),
    ([{"type": "inbox", "recipient": "a b", "title": "t", "body": "b"}],
     "channels[0].recipient"),
    ([{"type": "sms", "to": "+4915112345678", "text": "t", "cc": "x"}], "channels[0].cc"),
])
def test_bad_channels_name_the_field(channels: object, field: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_channels(channels)
    assert e.value.extra["field"] == field
