"""The synchronous client: ``TriggerClient(base_url=..., token=...)``.

Its groups ``triggers``, ``dead_letters``, ``inbox``, ``signing`` and ``ops`` cover every
operation of ``openapi.yaml``. Every call raises an :class:`~trigger_client.errors.ApiError`
subclass for a non-2xx answer and :class:`~trigger_client.errors.ConnectionFailed` when
nothing answered (after its retries, see :mod:`trigger_client._retry`). Thread-safe as
``httpx.Client`` is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar, Unpack

import httpx
import tenacity

from trigger_client import _calls as calls
from trigger_client import endpoints as endpoint_calls
from trigger_client import subscriptions as subscription_calls
from trigger_client._http import DEFAULT_TIMEOUT_S, answer, base_headers, build
from trigger_client._retry import NO_RETRY, RetryPolicy, retrying_kwargs
from trigger_client._sse import SseParser
from trigger_client.endpoints import EndpointEnabled, EndpointHealth
from trigger_client.errors import ConnectionFailed, error_from_response
from trigger_client.models import (
    AckResult,
    CancelledTrigger,
    CreatedTrigger,
    DstPolicy,
    Page,
    Preview,
    RunStarted,
    SigningSecret,
    Status,
    Trigger,
)
from trigger_client.pausing import CatchUpPolicy, PausedCaller, ResumeJob
from trigger_client.requests import (
    PatchFields,
    TriggerFields,
    TriggerRequest,
    patch_body,
    request_from,
    snooze_body,
)
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
from trigger_client.subscriptions import EventSubscription, FailedEvent, SubscriptionDeleted

T = TypeVar("T")


def iterate(fetch: Callable[[str | None], Page[T]]) -> Iterator[T]:
    """Every item of every page, fetching the next page only when needed."""
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        yield from page.items
        if not page.next_cursor:
            return
        cursor = page.next_cursor


class _Executor:
    def __init__(self, http: httpx.Client, policy: RetryPolicy,
                 sleep: Callable[[float], None]) -> None:
        self.http = http
        self._policy = policy
        self._sleep = sleep

    def run(self, call: calls.Call[T]) -> T:
        request = build(self.http, call)
        retrying = tenacity.Retrying(sleep=self._sleep, **retrying_kwargs(
            self._policy if call.retry else NO_RETRY))
        try:
            response: httpx.Response = retrying(self.http.send, request)
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{call.method} {call.path}: {e!r}") from e
        return answer(call, response)


class Triggers:
    """``/v1/triggers``: create, read, list, preview, patch, snooze, acknowledge, cancel."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    def create(self, request: TriggerRequest | None = None, *,
               idempotency_key: str | None = None,
               **fields: Unpack[TriggerFields]) -> CreatedTrigger:
        """Register a trigger (``request``, or its fields as keywords). Always sent with an
        Idempotency-Key (``idempotency_key``, or a fresh one) and retried with that same key,
        so retries never make two triggers; ``.replayed`` says the key had been used.
        Raises ``InvalidRequest`` (``.candidates`` for an ambiguous ``when``),
        ``Unprocessable``, ``RateLimited``, ..."""
        req = request_from(request, fields)
        return self._x.run(calls.create(req, idempotency_key))

    def create_batch(self, requests: Sequence[TriggerRequest], *,
                     idempotency_keys: Sequence[str | None] | None = None
                     ) -> list[BatchItemResult]:
        """Register up to 1,000 triggers in one request (``POST /v1/triggers/batch``), each
        answered on its own, in order (``BatchItemResult``: ``.ok``, ``.trigger_id``, or the
        error the single create would raise). Each item has an Idempotency-Key (its own from
        ``idempotency_keys``, else a fresh one) kept over every retry of the request, so a
        retry never makes two. Raises ``ValueError`` (more than 1,000), ``InvalidRequest``
        (the request itself), ``RateLimited`` (all of it), ..."""
        return self._x.run(calls.create_batch(requests, idempotency_keys))

    def preview(self, request: TriggerRequest | None = None, *, count: int | None = None,
                after: datetime | str | None = None, idempotency_key: str | None = None,
                **fields: Unpack[TriggerFields]) -> Preview:
        """The first ``count`` occurrences (strictly after ``after``); nothing is stored.
        With ``jitter_s``, ``.jittered`` has each one's window, and its exact instant when
        ``idempotency_key`` is the key the create will be sent with."""
        req = request_from(request, fields)
        return self._x.run(calls.preview(req, count, after, idempotency_key))

    def get(self, trigger_id: str) -> Trigger:
        return self._x.run(calls.get_trigger(trigger_id))

    def attempts(self, trigger_id: str, limit: int | None = None,
             cursor: str | None = None) -> Page[TriggerAttempt]:
        """One page of the trigger's delivery attempts, newest first (the service keeps the
        newest ``TRIGGER_ATTEMPTS_KEPT``; ``limit`` at most that, default 50). ``NotFound``
        for an unknown trigger or another caller's."""
        return self._x.run(calls.trigger_attempts(trigger_id, limit, cursor))

    def list_page(self, status: Status | str | None = None, *, limit: int | None = None,
                  cursor: str | None = None, tag: str | None = None, label: str | None = None,
                  recipient: str | None = None) -> Page[Trigger]:
        """One page; ``tag``, ``label`` (``"key:value"``) and ``recipient`` filter (a page
        may then be short, even empty, with a cursor: the read is bounded)."""
        return self._x.run(calls.list_triggers(status, limit, cursor, tag=tag, label=label,
                                               recipient=recipient))

    def list(self, status: Status | str | None = None, *, page_size: int | None = None,
             tag: str | None = None, label: str | None = None,
             recipient: str | None = None) -> Iterator[Trigger]:
        """Every trigger of the caller, page by page: PENDING or IN_FLIGHT by fire time, else
        (all, or a finished status, or any filter) newest created first."""
        return iterate(lambda c: self.list_page(status, limit=page_size, cursor=c, tag=tag,
                                                label=label, recipient=recipient))

    def start_job(self, action: str, *, tag: str | None = None, label: str | None = None,
                  recipient: str | None = None, status: Status | str | None = None,
                  policy: str | None = None) -> TriggerJob:
        """A job applying ``action`` (``"cancel"``, ``"pause"``, ``"resume"`` with
        ``policy``) to every unfinished trigger the filter matches (a tag, label or
        recipient is needed); follow it with ``job``/``wait_job``."""
        return self._x.run(calls.start_trigger_job(
            action, calls.trigger_filter(tag, label, recipient, status), policy))

    def backfill(self, trigger_id: str, from_: datetime | str,
                 to: datetime | str) -> TriggerJob:
        """A job firing the series' occurrences scheduled in ``[from_, to)`` and before
        now, once each, oldest first, paced by its flow control (instants: aware datetimes
        or RFC 3339 text); follow it with ``job``/``wait_job``. A second backfill over the
        same range fires nothing again. ``Unprocessable`` (not_backfillable) for a
        one-time trigger or a range in the future."""
        return self._x.run(calls.backfill(trigger_id, from_, to))

    def job(self, job_id: str) -> TriggerJob:
        return self._x.run(calls.get_trigger_job(job_id))

    def wait_job(self, job_id: str, *, poll_s: float = 0.5,
                 on_progress: Callable[[TriggerJob], None] | None = None) -> TriggerJob:
        """Poll the job until it is done; ``on_progress`` sees every state."""
        while True:
            job = self.job(job_id)
            if on_progress:
                on_progress(job)
            if job.finished:
                return job
            time.sleep(poll_s)

    def cancel(self, trigger_id: str) -> CancelledTrigger:
        """Idempotent; ``Conflict`` (not_cancellable) once it is in flight or finished."""
        return self._x.run(calls.cancel(trigger_id))

    def patch(self, trigger_id: str, **changes: Unpack[PatchFields]) -> Trigger:
        """A JSON merge patch: a field given as None is removed. ``Conflict``
        (not_editable) on a finished trigger."""
        return self._x.run(calls.patch(trigger_id, patch_body(changes)))

    def snooze(self, trigger_id: str, *, delay_s: float | None = None,
               fire_at: datetime | str | None = None, local_time: datetime | str | None = None,
               time_zone: str | None = None, dst_policy: DstPolicy | None = None,
               when: str | None = None,
               idempotency_key: str | None = None) -> CreatedTrigger:
        """A new one-time trigger like this one at the time given (``.snoozed_from``):
        ``when`` a one-time phrase ("in 10 minutes"), read in the original's zone."""
        body = snooze_body(delay_s=delay_s, fire_at=fire_at, local_time=local_time,
                           time_zone=time_zone, dst_policy=dst_policy, when=when)
        return self._x.run(calls.snooze(trigger_id, body, idempotency_key))

    def run(self, trigger_id: str, *, idempotency_key: str | None = None) -> RunStarted:
        """Fire the trigger now: a one-time trigger moves to now (same occurrence id); a
        series or a paused trigger gets an extra occurrence, a one-time copy firing now
        (``.run_trigger_id``). Once per ``idempotency_key`` (one is made if not given, so
        the SDK's own retries run it once)."""
        return self._x.run(calls.run(trigger_id, idempotency_key))

    def pause(self, trigger_id: str) -> Trigger:
        """PENDING → PAUSED (idempotent): nothing is delivered until ``resume``. ``Conflict``
        (not_editable) once finished, or a one-time trigger in flight."""
        return self._x.run(calls.pause(trigger_id))

    def resume(self, trigger_id: str, policy: CatchUpPolicy | str | None = None) -> Trigger:
        """PAUSED → PENDING; of the occurrences that came due meanwhile, ``policy`` (default:
        the series' catch-up policy) fires all, the latest, or none. Idempotent."""
        return self._x.run(calls.resume(trigger_id, str(policy) if policy else None))

    def ack(self, trigger_id: str, occurrence_id: str | None = None) -> AckResult:
        """Stop the occurrence's escalation (idempotent)."""
        return self._x.run(calls.ack(trigger_id, occurrence_id))


class DeadLetters:
    """``/v1/dead-letters``: list, read, replay one or in bulk, purge."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    def list_page(self, *, reason: str | None = None, since: datetime | str | None = None,
                  until: datetime | str | None = None, callback_prefix: str | None = None,
                  caller: str | None = None, limit: int | None = None,
                  cursor: str | None = None) -> Page[DeadLetter]:
        return self._x.run(calls.list_dead_letters(
            reason=reason, since=since, until=until, callback_prefix=callback_prefix,
            caller=caller, limit=limit, cursor=cursor))

    def list(self, *, reason: str | None = None, since: datetime | str | None = None,
             until: datetime | str | None = None, callback_prefix: str | None = None,
             caller: str | None = None, page_size: int | None = None) -> Iterator[DeadLetter]:
        """Every matching dead letter, newest first."""
        return iterate(lambda c: self.list_page(
            reason=reason, since=since, until=until, callback_prefix=callback_prefix,
            caller=caller, limit=page_size, cursor=c))

    def get(self, dead_letter_id: str) -> DeadLetter:
        return self._x.run(calls.get_dead_letter(dead_letter_id))

    def replay(self, dead_letter_id: str, *, fire_at: datetime | str | None = None) -> ReplayResult:
        """Deliver it again (now, or at ``fire_at``); ``Conflict`` already_replayed."""
        return self._x.run(calls.replay_dead_letter(dead_letter_id, fire_at))

    def purge(self, dead_letter_id: str) -> PurgeResult:
        return self._x.run(calls.purge_dead_letter(dead_letter_id))

    def replay_all(self, *, reason: str | None = None, since: datetime | str | None = None,
                   until: datetime | str | None = None, callback_prefix: str | None = None,
                   caller: str | None = None) -> ReplayJob:
        """Start a bulk replay job (at most 10,000 letters); follow it with ``replay_job``."""
        return self._x.run(calls.start_bulk_replay(
            reason=reason, since=since, until=until, callback_prefix=callback_prefix,
            caller=caller))

    def replay_job(self, job_id: str) -> ReplayJob:
        return self._x.run(calls.get_bulk_replay(job_id))

    def wait_replay(self, job_id: str, *, poll_s: float = 0.5,
                    on_progress: Callable[[ReplayJob], None] | None = None) -> ReplayJob:
        """Poll the job until it is done; ``on_progress`` sees every state."""
        while True:
            job = self.replay_job(job_id)
            if on_progress:
                on_progress(job)
            if job.finished:
                return job
            time.sleep(poll_s)


class Inbox:
    """``/v1/inbox/{recipient}``: list, mark read, delete, the live stream."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    def list_page(self, recipient: str, *, unread: bool | None = None,
                  limit: int | None = None, cursor: str | None = None) -> Page[InboxMessage]:
        return self._x.run(calls.list_inbox(recipient, unread, limit, cursor))

    def list(self, recipient: str, *, unread: bool | None = None,
             page_size: int | None = None) -> Iterator[InboxMessage]:
        return iterate(lambda c: self.list_page(recipient, unread=unread, limit=page_size,
                                                cursor=c))

    def mark_read(self, recipient: str, message_id: str) -> None:
        self._x.run(calls.mark_read(recipient, message_id))

    def delete(self, recipient: str, message_id: str) -> None:
        self._x.run(calls.delete_message(recipient, message_id))

    def stream(self, recipient: str, *, last_event_id: str | None = None) -> Iterator[InboxMessage]:
        """New messages as they come (after ``last_event_id``'s first), until the server
        ends the stream; resume with the last message's id."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        timeout = httpx.Timeout(DEFAULT_TIMEOUT_S, read=None)
        with self._x.http.stream("GET", calls.stream_path(recipient), headers=headers,
                                 timeout=timeout) as resp:
            if resp.status_code >= 300:
                resp.read()
                raise error_from_response(resp)
            parser = SseParser()
            for line in resp.iter_lines():
                event = parser.feed(line)
                if event is not None and event.data:
                    yield InboxMessage.from_json(json.loads(event.data))


class Ops:
    """Ops and health: overview and stats (ops tokens), healthz, readyz, metrics, the
    contract, acknowledgement links (no token)."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    def audit(self, *, since: datetime | str | None = None, action: str | None = None,
              actor: str | None = None, cursor: str | None = None,
              limit: int | None = None) -> Page[AuditEntry]:
        """Operators and viewers: one page of every audit entry, newest first (``actor``:
        one caller's or operator's)."""
        return self._x.run(calls.list_ops_audit(since=since, action=action, actor=actor,
                                              limit=limit, cursor=cursor))

    def overview(self) -> OpsOverview:
        return self._x.run(calls.ops_overview())

    def stats(self) -> dict[str, int]:
        return self._x.run(calls.stats())

    def pause_caller(self, caller: str) -> dict[str, Any]:
        """Operators: hold every due trigger of ``caller`` (they turn PAUSED)."""
        return self._x.run(calls.pause_caller(caller))

    def resume_caller(self, caller: str,
                      policy: CatchUpPolicy | str | None = None) -> ResumeJob:
        """Operators: clear the pause and start the job that resumes its PAUSED triggers."""
        return self._x.run(calls.resume_caller(caller, str(policy) if policy else None))

    def paused_callers(self) -> list[PausedCaller]:
        return self._x.run(calls.paused_callers())

    def resume_job(self, job_id: str) -> ResumeJob:
        return self._x.run(calls.resume_job(job_id))

    def healthz(self) -> Health:
        return self._x.run(calls.healthz())

    def readyz(self) -> Health:
        """``ok`` False with ``down`` naming the dependencies when not ready (no raise)."""
        return self._x.run(calls.readyz())

    def metrics(self) -> str:
        return self._x.run(calls.metrics())

    def openapi(self) -> dict[str, Any]:
        return self._x.run(calls.openapi())

    def show_ack_link(self, token: str) -> str:
        return self._x.run(calls.show_ack_link(token))

    def use_ack_link(self, token: str) -> str:
        return self._x.run(calls.use_ack_link(token))


class Recipients:
    """``/v1/recipients``: a caller's people (put = create or replace, get, delete, list)."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    def put(self, profile: Recipient) -> Recipient:
        return self._x.run(calls.put_recipient(profile))

    def get(self, recipient_id: str) -> Recipient:
        return self._x.run(calls.get_recipient(recipient_id))

    def delete(self, recipient_id: str) -> RecipientDeleted:
        """Its pending triggers end FAILED (dead letter ``recipient_deleted``)."""
        return self._x.run(calls.delete_recipient(recipient_id))

    def list_page(self, *, limit: int | None = None, after: str | None = None
                  ) -> RecipientPage:
        return self._x.run(calls.list_recipients(limit, after))

    def list(self, *, page_size: int | None = None) -> Iterator[Recipient]:
        after: str | None = None
        while True:
            page = self.list_page(limit=page_size, after=after)
            yield from page.items
            if page.next_after is None:
                return
            after = page.next_after


class Endpoints:
    """``/v1/endpoints``: the caller's failing and disabled callback origins; enable one
    (with ``replay_since``: replay what was held since then). Operators: ``list_all`` and
    ``enable_for`` (``/v1/ops/endpoints``)."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    def enable(self, origin: str, replay_since: datetime | None = None) -> EndpointEnabled:
        return self._x.run(endpoint_calls.enable_endpoint(origin, replay_since))

    def list_all(self) -> list[EndpointHealth]:
        return self._x.run(endpoint_calls.list_all_endpoints())

    def enable_for(self, caller: str, origin: str,
                   replay_since: datetime | None = None) -> EndpointEnabled:
        return self._x.run(endpoint_calls.enable_caller_endpoint(caller, origin, replay_since))

    # Last: the name shadows the builtin in the annotations below it.
    def list(self) -> list[EndpointHealth]:
        return self._x.run(endpoint_calls.list_endpoints())


class Subscriptions:
    """``/v1/event-subscriptions``: the caller's subscriptions to its own events (a trigger
    dead-lettered, failed, fired; a series finished; an endpoint disabled or enabled), each
    POSTed signed to ``url`` (verify with ``receiver.verify_event``)."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    def put(self, name: str, url: str, events: Iterable[str]) -> EventSubscription:
        """Create or replace subscription ``name`` (``events``: ``subscriptions.EVENT_TYPES``)."""
        return self._x.run(subscription_calls.put_subscription(name, url, events))

    def delete(self, name: str) -> SubscriptionDeleted:
        return self._x.run(subscription_calls.delete_subscription(name))

    def failures(self, name: str) -> list[FailedEvent]:
        """The events given up on for ``name``, newest first."""
        return self._x.run(subscription_calls.subscription_failures(name))

    # Last: the name shadows the builtin in the annotations below it.
    def list(self) -> list[EventSubscription]:
        return self._x.run(subscription_calls.list_subscriptions())


class Signing:
    def __init__(self, x: _Executor) -> None:
        self._x = x

    def rotate(self) -> SigningSecret:
        """A new current signing secret, shown once; the old ones sign for the overlap."""
        return self._x.run(calls.rotate_signing_secret())


class TriggerClient:
    """``TriggerClient(base_url="http://127.0.0.1:8080", token="dev-token")``; use as a
    context manager or call ``close()``. ``transport`` (e.g. ``httpx.MockTransport``) and
    ``sleep`` are for tests."""

    def __init__(self, base_url: str, token: str | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.http = httpx.Client(base_url=base_url, headers=base_headers(token),
                                 timeout=timeout_s, transport=transport)
        x = _Executor(self.http, retry or RetryPolicy(), sleep)
        self._x = x
        self.triggers = Triggers(x)
        self.dead_letters = DeadLetters(x)
        self.inbox = Inbox(x)
        self.signing = Signing(x)
        self.recipients = Recipients(x)
        self.ops = Ops(x)
        self.endpoints = Endpoints(x)
        self.subscriptions = Subscriptions(x)

    def audit(self, *, since: datetime | str | None = None, action: str | None = None,
              cursor: str | None = None, limit: int | None = None) -> Page[AuditEntry]:
        """One page of this caller's own audit log, newest first: its mutating requests
        and how each was answered (``nextCursor`` goes on)."""
        return self._x.run(calls.list_audit(since=since, action=action, limit=limit,
                                          cursor=cursor))

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> TriggerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
