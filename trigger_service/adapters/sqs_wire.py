"""What goes over the wire to SQS and comes back: message bodies (``schema.MSG_*``),
receipts that name their lane (``core.lanes``), and the failed entries of a batch answer.
``adapters.sqs`` makes the requests; this module only shapes and reads them."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from trigger_service.adapters import schema
from trigger_service.adapters.batching import NO_ERRORS, ItemErrors
from trigger_service.core.errors import MessageNotInFlight, QueueError
from trigger_service.core.model import Priority
from trigger_service.core.ports.values import ReceivedMessage

# What SQS (query and JSON protocols) and LocalStack answer for a queue that does not exist.
_MISSING_QUEUE_CODES = frozenset({
    "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue"})
# What SQS and LocalStack answer for a visibility change of a message no longer in flight
# for that receipt (shown again, received again, or deleted): by code, or LocalStack's
# InvalidParameterValue by its message.
_NOT_IN_FLIGHT_CODES = frozenset({
    "AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight", "ReceiptHandleIsInvalid"})
_NOT_IN_FLIGHT_TEXT = "not available for visibility timeout change"
# A receipt for lane i > 0 is ``~i~`` and SQS's handle (base64: it has no ``~``); lane 0's
# is SQS's own, as before lanes.
_LANE_MARK = "~"


def encode_body(trigger_id: str, fire_at_ms: int, home_at_ms: int | None = None,
                shard: int | None = None, caller: str | None = None,
                priority: Priority = Priority.NORMAL) -> str:
    body: dict[str, int | str] = {schema.MSG_TRIGGER_ID: trigger_id,
                                  schema.MSG_FIRE_AT_MS: fire_at_ms}
    if home_at_ms is not None and shard is not None:
        body[schema.MSG_HOME_AT_MS] = home_at_ms
        body[schema.MSG_SHARD] = shard
    if caller is not None:
        body[schema.MSG_CALLER] = caller
    if priority is not Priority.NORMAL:
        body[schema.MSG_PRIORITY] = priority.value
    return json.dumps(body)


def body_priority(body: Any) -> Priority:
    """The priority a parsed body names; normal when it names none or one not known (an
    earlier or a later release's)."""
    raw = body.get(schema.MSG_PRIORITY) if isinstance(body, dict) else None
    try:
        return Priority(raw) if isinstance(raw, str) else Priority.NORMAL
    except ValueError:
        return Priority.NORMAL


def lane_receipt(lane: int, handle: str) -> str:
    """The receipt handed out for SQS's ``handle`` of a message received from ``lane``."""
    return f"{_LANE_MARK}{lane}{_LANE_MARK}{handle}" if lane else handle


def split_receipt(receipt: str, lanes: int) -> tuple[int, str]:
    """The lane a ``lane_receipt`` names and SQS's handle; ``QueueError`` for a lane not
    among ``lanes`` (the setting was lowered since the message was received)."""
    if not receipt.startswith(_LANE_MARK):
        return 0, receipt
    _, lane, handle = receipt.split(_LANE_MARK, 2)
    if not lane.isdigit() or int(lane) >= lanes:
        raise QueueError(f"sqs: a receipt for lane {lane!r} (there are {lanes})")
    return int(lane), handle


def clamp_visibility(visibility_s: int) -> int:
    return max(0, min(schema.SQS_MAX_VISIBILITY_S, visibility_s))


def entry_errors(what: str, resp: dict[str, Any], count: int,
                 ignore: frozenset[str] = frozenset()) -> ItemErrors:
    """The entries a batch request reports as failed (``Failed``, by ``Id``: their position),
    each as its own ``QueueError``; codes in ``ignore`` count as done."""
    errors: dict[int, Exception] = {}
    for f in resp.get("Failed") or []:
        if f.get("Code") in ignore:
            continue
        try:
            position = int(f["Id"])
        except (KeyError, TypeError, ValueError):
            position = -1
        code, text = f.get("Code"), str(f.get("Message", ""))
        kind = (MessageNotInFlight if code in _NOT_IN_FLIGHT_CODES or _NOT_IN_FLIGHT_TEXT in text
                else QueueError)
        error = kind(f"sqs {what}: entry refused: {code} {text}")
        if not 0 <= position < count:
            # An answer we cannot place: fail the whole batch rather than lose one.
            return dict.fromkeys(range(count), error)
        errors[position] = error
    return errors or NO_ERRORS


def queue_missing(e: ClientError) -> bool:
    return e.response.get("Error", {}).get("Code") in _MISSING_QUEUE_CODES


def parse_body(m: dict[str, Any]) -> Any:
    """A received message's body parsed (None: not JSON)."""
    try:
        return json.loads(m["Body"])
    except (ValueError, KeyError, TypeError):
        return None


def receive_count(m: dict[str, Any]) -> int:
    return int(m.get("Attributes", {}).get(schema.SQS_ATTR_RECEIVE_COUNT, 1))


def decode_message(m: dict[str, Any], lane: int = 0, body: Any = None) -> ReceivedMessage:
    """A plain (one trigger) message as received; ``body``: already parsed."""
    try:
        body = json.loads(m["Body"]) if body is None else body
        trigger_id = str(body[schema.MSG_TRIGGER_ID])
        fire_at_ms = int(body[schema.MSG_FIRE_AT_MS])
    except (ValueError, KeyError, TypeError):
        trigger_id, fire_at_ms = "", 0  # the dispatcher dead-letters malformed bodies
        body = {}
    home_at_ms, shard = body.get(schema.MSG_HOME_AT_MS), body.get(schema.MSG_SHARD)
    where = ((home_at_ms, shard) if isinstance(home_at_ms, int) and isinstance(shard, int)
             else (None, None))  # an earlier release's body, or not parsed: `get` finds it
    return ReceivedMessage(
        message_id=m["MessageId"],
        receipt_handle=lane_receipt(lane, m["ReceiptHandle"]),
        trigger_id=trigger_id,
        fire_at_ms=fire_at_ms,
        receive_count=receive_count(m),
        home_at_ms=where[0], shard=where[1],
        caller=caller if isinstance(caller := body.get(schema.MSG_CALLER), str) else None,
        priority=body_priority(body))


