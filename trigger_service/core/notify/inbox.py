"""The in-app inbox: one message per (occurrence, inbox channel), kept per
(caller, recipient). Pure: no I/O.

A message id is ``msg_<ULID>`` made from the occurrence's fire time (the ULID's time part,
so ids sort by fire time) and a hash of (occurrence id, channel index) (the rest): a
redelivered occurrence gets the same id, so storing it again changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from ulid import ULID

from trigger_service.core.notify.channels import InboxSpec, OccurrenceNotice
from trigger_service.core.time.timing import format_rfc3339_ms

MESSAGE_ID_PREFIX = "msg_"
MESSAGE_ID_RE = re.compile(r"^msg_[0-9A-HJKMNP-TV-Z]{26}$")
MAX_LIST_LIMIT = 200
DEFAULT_LIST_LIMIT = 50
REPLAY_MAX = 500  # messages a reconnecting stream gets from the store, oldest first


def message_id(occurrence_id: str, channel_index: int, fire_at_ms: int) -> str:
    """Deterministic and time-sortable: the same arguments always give the same id."""
    digest = hashlib.sha256(f"{occurrence_id}:{channel_index}".encode()).digest()
    raw = max(0, fire_at_ms).to_bytes(6, "big") + digest[:10]
    return MESSAGE_ID_PREFIX + str(ULID.from_bytes(raw))


def is_message_id(text: str) -> bool:
    return bool(MESSAGE_ID_RE.match(text))


def bus_message_id(payload: str) -> str | None:
    """The message id an ``InboxBus`` payload names: the id itself, or the message's JSON
    (what dispatchers of an earlier release publish) by its ``messageId``; None for anything
    else. Only a hint: a stream sends the message as its store holds it, if at all."""
    if is_message_id(payload):
        return payload
    try:
        found = json.loads(payload)["messageId"]
    except (ValueError, KeyError, TypeError):
        return None
    return found if isinstance(found, str) and is_message_id(found) else None


@dataclass(frozen=True, slots=True)
class InboxMessage:
    caller: str
    recipient: str
    message_id: str
    trigger_id: str
    occurrence_id: str
    title: str
    body: str
    data_json: str | None
    created_at_ms: int
    read_at_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The API's and the stream's shape of one message."""
        return {
            "messageId": self.message_id, "triggerId": self.trigger_id,
            "occurrenceId": self.occurrence_id, "title": self.title, "body": self.body,
            "data": None if self.data_json is None else json.loads(self.data_json),
            "createdAt": format_rfc3339_ms(self.created_at_ms),
            "readAt": None if self.read_at_ms is None else format_rfc3339_ms(self.read_at_ms),
        }


def message_for(spec: InboxSpec, occ: OccurrenceNotice, now_ms: int) -> InboxMessage:
    """The message an inbox channel stores for one occurrence; ``occ.ack_url`` goes into the
    data as ``ackUrl`` (data that is not a JSON object is kept under ``value``)."""
    data_json = spec.data_json
    if occ.ack_url:
        data: Any = {} if data_json is None else json.loads(data_json)
        if not isinstance(data, dict):
            data = {"value": data}
        data["ackUrl"] = occ.ack_url
        data_json = json.dumps(data, separators=(",", ":"))
    return InboxMessage(
        caller=occ.caller, recipient=spec.recipient,
        message_id=message_id(occ.occurrence_id, occ.channel_index, occ.fire_at_ms),
        trigger_id=occ.trigger_id, occurrence_id=occ.occurrence_id, title=spec.title,
        body=spec.body, data_json=data_json, created_at_ms=now_ms)


@dataclass(frozen=True, slots=True)
class InboxPage:
    items: list[InboxMessage]
    next_before: str | None  # a listing goes on with the ids older than this one


def encode_cursor(before_id: str) -> str:
    return base64.urlsafe_b64encode(before_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str | None:
    """The message id a cursor holds, or None if it is not one of ours."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        return None
    return text if is_message_id(text) else None


# The same rule as an inbox channel's ``recipient`` (``core.notify.channels``).
_RECIPIENT_RE = re.compile(r"^[A-Za-z0-9_.:@+-]{1,200}$")


def is_recipient(text: str) -> bool:
    return bool(_RECIPIENT_RE.match(text))
