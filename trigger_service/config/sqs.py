"""Settings of the SQS queues (section ``sqs`` of ``settings.Settings``); ``SQS_VARIABLES``
are their rows of ``settings.VARIABLES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trigger_service.config.parsers import int_up_to
from trigger_service.config.parsers import pos_int as _pos_int

Row = tuple[str, tuple[str, str], Callable[[str], Any], str]
_linger_ms = int_up_to(1000)  # a wait added to calls under load: past 1 s, a mistake
_lanes = int_up_to(64)  # each lane is a long poll per dispatcher: past 64, a mistake


def _high_lanes(raw: str) -> int:
    """0 (high-priority messages in their caller's lane) up to 16."""
    value = int(raw)
    if not 0 <= value <= 16:
        raise ValueError("must be between 0 and 16")
    return value

# A member is at most ~150 bytes (a 64-character caller name): 10 packs of 150 in a
# SendMessageBatch stay under SQS's 256 KiB a request.
_pack_max = int_up_to(150)


def _pack_linger_ms(raw: str) -> int:
    """0 (no wait) up to 5 s: a third of the default enqueue lead."""
    value = int(raw)
    if not 0 <= value <= 5000:
        raise ValueError("must be between 0 and 5000")
    return value


@dataclass(frozen=True)
class SqsSettings:
    endpoint_url: str = "http://127.0.0.1:4566"
    region: str = "us-east-1"
    access_key_id: str = "test"
    secret_access_key: str = field(default="test", repr=False)
    queue: str = "triggers"
    dlq: str = "triggers-dlq"
    redrive_queue: str = "triggers-redrive"
    # SQS delays are whole seconds and LocalStack shows a message up to ~1 s after its delay:
    # the message is asked to appear this much before its fire time and the dispatcher holds it.
    enqueue_lead_s: int = 15
    max_receive_count: int = 50
    # One retry layer: botocore's standard mode (exponential backoff with jitter, only for
    # errors it knows to be transient), this many attempts per call in all.
    max_attempts: int = 3
    # The longest a message waits for company in a batch request (a lone one goes at once);
    # docs/architecture.md "SQS batches" says why these values.
    send_linger_ms: int = 20
    delete_linger_ms: int = 250
    visibility_linger_ms: int = 20
    # SQS sends an API process has started in the background and not yet seen answered: past
    # it, a registration leaves its durable row to the due-scan (app.triggers.enqueue).
    max_background_sends: int = 10_000
    # The main queue is this many queues, a caller's messages in one (core.lanes): one
    # caller's herd does not stand in front of another caller's messages on SQS.
    lanes: int = 8
    # And this many more for high-priority messages (core.lanes; 0: they go to their
    # caller's lane, behind its herd on SQS).
    high_lanes: int = 2
    # Triggers one message may carry when they are sent with the same delay (a herd's second,
    # a batch): adapters.sqs_packs. 1: one message each.
    pack_max: int = 50
    # A message not due to show for at least this long waits up to this long for others of
    # its delay to share its pack (inside the enqueue lead: never late).
    pack_linger_ms: int = 1000


SQS_VARIABLES: tuple[Row, ...] = (
    ("TRIGGER_SQS_ENDPOINT_URL", ("sqs", "endpoint_url"), str,
             "SQS endpoint (LocalStack locally)"),
    ("TRIGGER_SQS_REGION", ("sqs", "region"), str, "SQS region"),
    ("TRIGGER_SQS_ACCESS_KEY_ID", ("sqs", "access_key_id"), str, "SQS key id"),
    ("TRIGGER_SQS_SECRET_ACCESS_KEY", ("sqs", "secret_access_key"), str, "SQS secret"),
    ("TRIGGER_SQS_QUEUE", ("sqs", "queue"), str, "main queue name"),
    ("TRIGGER_SQS_DLQ", ("sqs", "dlq"), str, "dead-letter queue name"),
    ("TRIGGER_SQS_REDRIVE_QUEUE", ("sqs", "redrive_queue"), str,
             "where SQS's redrive policy moves a poison message; the reconciler marks its "
             "trigger FAILED and dead-letters it"),
    ("TRIGGER_SQS_ENQUEUE_LEAD_S", ("sqs", "enqueue_lead_s"), _pos_int,
             "messages are made visible this many seconds before the fire time; the dispatcher "
             "holds them to the millisecond"),
    ("TRIGGER_SQS_MAX_RECEIVE_COUNT", ("sqs", "max_receive_count"), _pos_int,
             "redrive policy: receives before SQS itself moves a poison message to the "
             "redrive queue (deferrals never count: a deferred message is refreshed)"),
    ("TRIGGER_SQS_MAX_ATTEMPTS", ("sqs", "max_attempts"), _pos_int,
             "attempts per SQS call (botocore's standard retries); a registration whose send "
             "still fails is left to the due-scan"),
    ("TRIGGER_SQS_SEND_LINGER_MS", ("sqs", "send_linger_ms"), _linger_ms,
             "the longest a message to send waits for others to share its SendMessageBatch "
             "(a lone one goes at once)"),
    ("TRIGGER_SQS_DELETE_LINGER_MS", ("sqs", "delete_linger_ms"), _linger_ms,
             "the longest a delete waits for others to share its DeleteMessageBatch (it always "
             "waits: nobody waits for a delete)"),
    ("TRIGGER_SQS_VISIBILITY_LINGER_MS", ("sqs", "visibility_linger_ms"), _linger_ms,
             "the same for a batched visibility change (ChangeMessageVisibilityBatch)"),
    ("TRIGGER_SQS_LANES", ("sqs", "lanes"), _lanes,
             "the main queue is this many SQS queues (lanes), each caller's messages in one "
             "by a hash of its name, each lane with its own long poll in every dispatcher: one "
             "caller's herd does not queue in front of another's. Lowering it leaves the "
             "dropped lanes' messages to the due-scan: drain them first"),
    ("TRIGGER_SQS_HIGH_LANES", ("sqs", "high_lanes"), _high_lanes,
             "this many more SQS queues (named <queue>-high-<i>) for high-priority messages, "
             "each caller's in one by the same hash, each with its own long poll in every "
             "dispatcher: a caller's high-priority triggers are not queued behind its own herd. "
             "0: they go to their caller's lane (the dispatcher still orders them first)"),
    ("TRIGGER_SQS_PACK_MAX", ("sqs", "pack_max"), _pack_max,
             "triggers one SQS message may carry when sent together with the same delay (a "
             "herd promoted by the sweeper, a batch, concurrent registrations): a herd costs "
             "SQS one message per this many; 1 sends one message each. A message carries each "
             "trigger's id, times and caller (at most about 150 bytes): at most 150, so that ten "
             "such messages stay under SQS's 256 KiB a request"),
    ("TRIGGER_SQS_PACK_LINGER_MS", ("sqs", "pack_linger_ms"), _pack_linger_ms,
             "a message that SQS is to hide at least this long (its trigger is due later than "
             "the enqueue lead and this) waits up to this long for others of its delay to share "
             "its pack; it shows that much later, still inside the enqueue lead. 0: no wait"),
    ("TRIGGER_SQS_MAX_BACKGROUND_SENDS", ("sqs", "max_background_sends"), _pos_int,
             "SQS sends an API process may have pending in the background (after answering); "
             "past it a trigger is left to the due-scan (`enqueue_overflow_total`)"),
)
