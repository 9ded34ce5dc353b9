"""Every operation of the API as a ``Call`` (pure): method, path, query, body, headers, how
to read the answer and whether it may be retried. The sync and async clients only execute
them, so both cover exactly the same operations.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from trigger_client.models import (
    AckResult,
    CancelledTrigger,
    CreatedTrigger,
    Page,
    Preview,
    RunStarted,
    SigningSecret,
    Status,
    Trigger,
)
from trigger_client.pausing import PausedCaller, ResumeJob
from trigger_client.requests import TriggerRequest
from trigger_client.resource_models import (
    AuditEntry,
    BatchItemResult,
    DeadLetter,
    Health,
    InboxMessage,
    OpsOverview,
    PurgeResult,
    Recipient,
    RecipientDeleted,
    RecipientPage,
    ReplayJob,
    ReplayResult,
    TriggerAttempt,
    TriggerJob,
)

T = TypeVar("T")
NO_BODY: Any = object()
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, str] = field(default_factory=dict)
    body: Any = NO_BODY
    headers: Mapping[str, str] = field(default_factory=dict)
    retry: bool = False
    content_type: str = "application/json"
    # 2xx plus these statuses are answers, not errors (readiness: 503 not_ready)
    ok_statuses: tuple[int, ...] = ()


def new_idempotency_key() -> str:
    """A fresh key for one create (kept over its retries)."""
    return f"sdk-{uuid.uuid4()}"


def seg(value: str) -> str:
    """``value`` as one path segment (nothing in it can change the route)."""
    return quote(value, safe="")


def _query(**params: str | int | bool | datetime | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, datetime):
            out[name] = value.isoformat()
        else:
            out[name] = str(value)
    return out


def _page(parse_item: Callable[[Any], T]) -> Callable[[httpx.Response], Page[T]]:
    def parse(r: httpx.Response) -> Page[T]:
        d = r.json()
        return Page(tuple(parse_item(i) for i in d["items"]), d.get("nextCursor"), d)
    return parse


def _created(r: httpx.Response) -> CreatedTrigger:
    return CreatedTrigger.from_json(r.json(), r.headers.get("Idempotent-Replayed") == "true")


# --- triggers --------------------------------------------------------------------------------

def create(request: TriggerRequest, key: str | None) -> Call[CreatedTrigger]:
    return Call("POST", "/v1/triggers", _created, body=request.to_json(),
                headers={"Idempotency-Key": key or new_idempotency_key()}, retry=True)


# Items in one POST /v1/triggers/batch at most.
MAX_BATCH_ITEMS = 1000


def create_batch(requests: Sequence[TriggerRequest],
                 keys: Sequence[str | None] | None) -> Call[list[BatchItemResult]]:
    """Every item with a key (its own, or a fresh one): retrying the whole request replays
    what was created and creates the rest."""
    if not 1 <= len(requests) <= MAX_BATCH_ITEMS:
        raise ValueError(f"create_batch: 1 to {MAX_BATCH_ITEMS} requests, not {len(requests)}")
    if keys is not None and len(keys) != len(requests):
        raise ValueError("create_batch: one idempotency key per request (None: a fresh one)")
    items = [{**r.to_json(), "idempotencyKey": (keys[i] if keys else None)
              or new_idempotency_key()} for i, r in enumerate(requests)]
    return Call("POST", "/v1/triggers/batch",
                lambda r: [BatchItemResult.from_json(i) for i in r.json()["items"]],
                body={"items": items}, retry=True)


def list_triggers(status: Status | str | None, limit: int | None, cursor: str | None, *,
                  tag: str | None = None, label: str | None = None,
                  recipient: str | None = None) -> Call[Page[Trigger]]:
    """``label``: ``"key:value"``."""
    return Call("GET", "/v1/triggers", _page(Trigger.from_json),
                params=_query(status=status, limit=limit, cursor=cursor, tag=tag, label=label,
                              recipient=recipient), retry=True)


def trigger_filter(tag: str | None, label: str | None, recipient: str | None,
                   status: Status | str | None) -> dict[str, str]:
    """A job's ``filter`` object: the parts given (``label`` as ``"key:value"``)."""
    given = {"tag": tag, "label": label, "recipient": recipient,
             "status": status.value if isinstance(status, Status) else status}
    return {k: v for k, v in given.items() if v is not None}


def start_trigger_job(action: str, filter_: Mapping[str, str],
                      policy: str | None) -> Call[TriggerJob]:
    body: dict[str, Any] = {"action": action, "filter": dict(filter_)}
    if policy is not None:
        body["policy"] = policy
    return Call("POST", "/v1/triggers/jobs", lambda r: TriggerJob.from_json(r.json()),
                body=body)


def backfill(trigger_id: str, from_: datetime | str, to: datetime | str) -> Call[TriggerJob]:
    # Safe to retry: a second job over the range fires nothing again (each occurrence's
    # copy has an id derived from it); a retried start only leaves one more, empty-handed job.
    body = {"from": from_.isoformat() if isinstance(from_, datetime) else from_,
            "to": to.isoformat() if isinstance(to, datetime) else to}
    return Call("POST", f"/v1/triggers/{seg(trigger_id)}/backfill",
                lambda r: TriggerJob.from_json(r.json()), body=body, retry=True)


def get_trigger_job(job_id: str) -> Call[TriggerJob]:
    return Call("GET", f"/v1/triggers/jobs/{seg(job_id)}",
                lambda r: TriggerJob.from_json(r.json()), retry=True)


def preview(request: TriggerRequest, count: int | None,
            after: datetime | str | None, key: str | None = None) -> Call[Preview]:
    """``key``: the Idempotency-Key the create will carry (the id derives from it: a jittered
    preview then shows each occurrence's exact instant); nothing is registered with it."""
    body = {**request.to_json(), **_query(after=after)}
    if count is not None:
        body["count"] = count
    return Call("POST", "/v1/triggers/preview", lambda r: Preview.from_json(r.json()),
                body=body, retry=True, headers={"Idempotency-Key": key} if key else {})


def get_trigger(trigger_id: str) -> Call[Trigger]:
    return Call("GET", f"/v1/triggers/{seg(trigger_id)}", lambda r: Trigger.from_json(r.json()),
                retry=True)


def trigger_attempts(trigger_id: str, limit: int | None,
                     cursor: str | None) -> Call[Page[TriggerAttempt]]:
    return Call("GET", f"/v1/triggers/{seg(trigger_id)}/attempts",
                _page(TriggerAttempt.from_json), params=_query(limit=limit, cursor=cursor),
                retry=True)


def cancel(trigger_id: str) -> Call[CancelledTrigger]:
    return Call("DELETE", f"/v1/triggers/{seg(trigger_id)}",
                lambda r: CancelledTrigger.from_json(r.json()), retry=True)


def patch(trigger_id: str, body: Mapping[str, Any]) -> Call[Trigger]:
    return Call("PATCH", f"/v1/triggers/{seg(trigger_id)}", lambda r: Trigger.from_json(r.json()),
                body=dict(body), content_type=MERGE_PATCH)


def snooze(trigger_id: str, body: Mapping[str, Any], key: str | None) -> Call[CreatedTrigger]:
    return Call("POST", f"/v1/triggers/{seg(trigger_id)}/snooze", _created, body=dict(body),
                headers={"Idempotency-Key": key or new_idempotency_key()}, retry=True)


def run(trigger_id: str, key: str | None) -> Call[RunStarted]:
    # Always keyed, so that a retried request runs once.
    return Call("POST", f"/v1/triggers/{seg(trigger_id)}/run",
                lambda r: RunStarted.from_json(r.json(),
                                               r.headers.get("Idempotent-Replayed") == "true"),
                headers={"Idempotency-Key": key or new_idempotency_key()}, retry=True)


def pause(trigger_id: str) -> Call[Trigger]:
    return Call("POST", f"/v1/triggers/{seg(trigger_id)}/pause",
                lambda r: Trigger.from_json(r.json()), retry=True)


def resume(trigger_id: str, policy: str | None) -> Call[Trigger]:
    return Call("POST", f"/v1/triggers/{seg(trigger_id)}/resume",
                lambda r: Trigger.from_json(r.json()),
                body={"policy": policy} if policy else {}, retry=True)


def ack(trigger_id: str, occurrence_id: str | None) -> Call[AckResult]:
    body = {"occurrenceId": occurrence_id} if occurrence_id else NO_BODY
    return Call("POST", f"/v1/triggers/{seg(trigger_id)}/ack",
                lambda r: AckResult.from_json(r.json()), body=body, retry=True)


def rotate_signing_secret() -> Call[SigningSecret]:
    return Call("POST", "/v1/signing-secrets/rotate", lambda r: SigningSecret.from_json(r.json()))


# --- dead letters ----------------------------------------------------------------------------

def list_dead_letters(*, reason: str | None, since: datetime | str | None,
                      until: datetime | str | None, callback_prefix: str | None,
                      caller: str | None, limit: int | None,
                      cursor: str | None) -> Call[Page[DeadLetter]]:
    params = _query(reason=reason, since=since, until=until, callbackPrefix=callback_prefix,
                    caller=caller, limit=limit, cursor=cursor)
    return Call("GET", "/v1/dead-letters", _page(DeadLetter.from_json), params=params,
                retry=True)


def get_dead_letter(dead_letter_id: str) -> Call[DeadLetter]:
    return Call("GET", f"/v1/dead-letters/{seg(dead_letter_id)}",
                lambda r: DeadLetter.from_json(r.json()), retry=True)


def purge_dead_letter(dead_letter_id: str) -> Call[PurgeResult]:
    return Call("DELETE", f"/v1/dead-letters/{seg(dead_letter_id)}",
                lambda r: PurgeResult.from_json(r.json()))


def replay_dead_letter(dead_letter_id: str, fire_at: datetime | str | None) -> Call[ReplayResult]:
    body = _query(fireAt=fire_at) or NO_BODY
    # not retried: a lost answer retried would be 409 already_replayed, which the caller
    # should see rather than a guess
    return Call("POST", f"/v1/dead-letters/{seg(dead_letter_id)}/replay",
                lambda r: ReplayResult.from_json(r.json()), body=body)


def start_bulk_replay(*, reason: str | None, since: datetime | str | None,
                      until: datetime | str | None, callback_prefix: str | None,
                      caller: str | None) -> Call[ReplayJob]:
    body = _query(reason=reason, since=since, until=until, callbackPrefix=callback_prefix,
                  caller=caller)
    return Call("POST", "/v1/dead-letters/replay", lambda r: ReplayJob.from_json(r.json()),
                body=body)


def get_bulk_replay(job_id: str) -> Call[ReplayJob]:
    return Call("GET", f"/v1/dead-letters/replay/{seg(job_id)}",
                lambda r: ReplayJob.from_json(r.json()), retry=True)


# --- inbox -----------------------------------------------------------------------------------

def list_inbox(recipient: str, unread: bool | None, limit: int | None,
               cursor: str | None) -> Call[Page[InboxMessage]]:
    return Call("GET", f"/v1/inbox/{seg(recipient)}", _page(InboxMessage.from_json),
                params=_query(unread=unread, limit=limit, cursor=cursor), retry=True)


def mark_read(recipient: str, message_id: str) -> Call[None]:
    return Call("POST", f"/v1/inbox/{seg(recipient)}/{seg(message_id)}/read", lambda r: None,
                retry=True)


def delete_message(recipient: str, message_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/inbox/{seg(recipient)}/{seg(message_id)}", lambda r: None,
                retry=True)


def stream_path(recipient: str) -> str:
    return f"/v1/inbox/{seg(recipient)}/stream"


# --- ops, health, contract, acknowledgement links --------------------------------------------

def list_audit(*, since: datetime | str | None, action: str | None, limit: int | None,
               cursor: str | None) -> Call[Page[AuditEntry]]:
    return Call("GET", "/v1/audit", _page(AuditEntry.from_json),
                params=_query(since=since, action=action, limit=limit, cursor=cursor),
                retry=True)


def list_ops_audit(*, since: datetime | str | None, action: str | None, actor: str | None,
                   limit: int | None, cursor: str | None) -> Call[Page[AuditEntry]]:
    return Call("GET", "/v1/ops/audit", _page(AuditEntry.from_json),
                params=_query(since=since, action=action, actor=actor, limit=limit,
                              cursor=cursor), retry=True)


def ops_overview() -> Call[OpsOverview]:
    return Call("GET", "/v1/ops/overview", lambda r: OpsOverview.from_json(r.json()), retry=True)


def pause_caller(caller: str) -> Call[dict[str, Any]]:
    return Call("POST", f"/v1/ops/callers/{seg(caller)}/pause", lambda r: dict(r.json()),
                retry=True)


def resume_caller(caller: str, policy: str | None) -> Call[ResumeJob]:
    # Not retried: each resume makes a job (a retry would make a second, harmless one).
    return Call("POST", f"/v1/ops/callers/{seg(caller)}/resume",
                lambda r: ResumeJob.from_json(r.json()),
                body={"policy": policy} if policy else {})


def paused_callers() -> Call[list[PausedCaller]]:
    return Call("GET", "/v1/ops/callers/paused",
                lambda r: [PausedCaller.from_json(i) for i in r.json()["items"]], retry=True)


def resume_job(job_id: str) -> Call[ResumeJob]:
    return Call("GET", f"/v1/ops/callers/resume-jobs/{seg(job_id)}",
                lambda r: ResumeJob.from_json(r.json()), retry=True)


def stats() -> Call[dict[str, int]]:
    return Call("GET", "/v1/stats", lambda r: dict(r.json()["counters"]), retry=True)


def _health(r: httpx.Response) -> Health:
    d = r.json()
    return Health(r.status_code < 300, r.status_code, tuple(d.get("down") or ()), d)


def healthz() -> Call[Health]:
    return Call("GET", "/healthz", _health, ok_statuses=(503,))


def readyz() -> Call[Health]:
    return Call("GET", "/readyz", _health, ok_statuses=(503,))


def metrics() -> Call[str]:
    return Call("GET", "/metrics", lambda r: r.text, retry=True)


def openapi() -> Call[dict[str, Any]]:
    return Call("GET", "/openapi.json", lambda r: dict(r.json()), retry=True)


def show_ack_link(token: str) -> Call[str]:
    """The link's HTML page (its status says what happened: 200, 400, 404, 409)."""
    return Call("GET", f"/ack/{seg(token)}", lambda r: r.text, ok_statuses=(400, 404, 409))


def use_ack_link(token: str) -> Call[str]:
    return Call("POST", f"/ack/{seg(token)}", lambda r: r.text, ok_statuses=(400, 404, 409))


# --- recipients ------------------------------------------------------------------------------

def put_recipient(profile: Recipient) -> Call[Recipient]:
    # idempotent: a create or replace with the same body, safe to retry
    return Call("PUT", f"/v1/recipients/{seg(profile.recipient_id)}",
                lambda r: Recipient.from_json(r.json()), body=profile.to_json(), retry=True)


def get_recipient(recipient_id: str) -> Call[Recipient]:
    return Call("GET", f"/v1/recipients/{seg(recipient_id)}",
                lambda r: Recipient.from_json(r.json()), retry=True)


def delete_recipient(recipient_id: str) -> Call[RecipientDeleted]:
    return Call("DELETE", f"/v1/recipients/{seg(recipient_id)}",
                lambda r: RecipientDeleted(r.json()["recipientId"],
                                           r.json()["triggersFailed"]))


def list_recipients(limit: int | None, after: str | None) -> Call[RecipientPage]:
    def parse(r: httpx.Response) -> RecipientPage:
        d = r.json()
        return RecipientPage(tuple(Recipient.from_json(i) for i in d["items"]),
                             d.get("nextAfter"))
    return Call("GET", "/v1/recipients", parse, params=_query(limit=limit, after=after),
                retry=True)
