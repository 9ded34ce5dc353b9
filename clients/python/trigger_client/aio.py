"""The asyncio client: ``AsyncTriggerClient(base_url=..., token=...)``, the same groups and
calls as :class:`trigger_client.TriggerClient` (coroutines; listings and the inbox stream
are async iterators). ``async with`` it, or ``await client.aclose()``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
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


async def aiterate(fetch: Callable[[str | None], Awaitable[Page[T]]]) -> AsyncIterator[T]:
    """Every item of every page, fetching the next page only when needed."""
    cursor: str | None = None
    while True:
        page = await fetch(cursor)
        for item in page.items:
            yield item
        if not page.next_cursor:
            return
        cursor = page.next_cursor


class _Executor:
    def __init__(self, http: httpx.AsyncClient, policy: RetryPolicy,
                 sleep: Callable[[float], Awaitable[None]]) -> None:
        self.http = http
        self.sleep = sleep
        self._policy = policy

    async def run(self, call: calls.Call[T]) -> T:
        request = build(self.http, call)
        retrying = tenacity.AsyncRetrying(sleep=self.sleep, **retrying_kwargs(
            self._policy if call.retry else NO_RETRY))
        try:
            response: httpx.Response = await retrying(self.http.send, request)
        except httpx.TransportError as e:
            raise ConnectionFailed(f"{call.method} {call.path}: {e!r}") from e
        return answer(call, response)


class AsyncTriggers:
    """As :class:`trigger_client.client.Triggers`."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    async def create(self, request: TriggerRequest | None = None, *,
                     idempotency_key: str | None = None,
                     **fields: Unpack[TriggerFields]) -> CreatedTrigger:
        """As ``TriggerClient.triggers.create``: one Idempotency-Key over every retry."""
        req = request_from(request, fields)
        return await self._x.run(calls.create(req, idempotency_key))

    async def create_batch(self, requests: Sequence[TriggerRequest], *,
                     idempotency_keys: Sequence[str | None] | None = None
                     ) -> list[BatchItemResult]:
        """Register up to 1,000 triggers in one request (``POST /v1/triggers/batch``), each
        answered on its own, in order (``BatchItemResult``: ``.ok``, ``.trigger_id``, or the
        error the single create would raise). Each item has an Idempotency-Key (its own from
        ``idempotency_keys``, else a fresh one) kept over every retry of the request, so a
        retry never makes two. Raises ``ValueError`` (more than 1,000), ``InvalidRequest``
        (the request itself), ``RateLimited`` (all of it), ..."""
        return await self._x.run(calls.create_batch(requests, idempotency_keys))

    async def preview(self, request: TriggerRequest | None = None, *, count: int | None = None,
                      after: datetime | str | None = None, idempotency_key: str | None = None,
                      **fields: Unpack[TriggerFields]) -> Preview:
        req = request_from(request, fields)
        return await self._x.run(calls.preview(req, count, after, idempotency_key))

    async def get(self, trigger_id: str) -> Trigger:
        return await self._x.run(calls.get_trigger(trigger_id))

    async def attempts(self, trigger_id: str, limit: int | None = None,
                       cursor: str | None = None) -> Page[TriggerAttempt]:
        """One page of the trigger's delivery attempts, newest first (the service keeps the
        newest ``TRIGGER_ATTEMPTS_KEPT``; ``limit`` at most that, default 50). ``NotFound``
        for an unknown trigger or another caller's."""
        return await self._x.run(calls.trigger_attempts(trigger_id, limit, cursor))

    async def list_page(self, status: Status | str | None = None, *, limit: int | None = None,
                        cursor: str | None = None, tag: str | None = None,
                        label: str | None = None, recipient: str | None = None
                        ) -> Page[Trigger]:
        return await self._x.run(calls.list_triggers(status, limit, cursor, tag=tag,
                                                     label=label, recipient=recipient))

    def list(self, status: Status | str | None = None, *, page_size: int | None = None,
             tag: str | None = None, label: str | None = None,
             recipient: str | None = None) -> AsyncIterator[Trigger]:
        return aiterate(lambda c: self.list_page(status, limit=page_size, cursor=c, tag=tag,
                                                 label=label, recipient=recipient))

    async def start_job(self, action: str, *, tag: str | None = None,
                        label: str | None = None, recipient: str | None = None,
                        status: Status | str | None = None,
                        policy: str | None = None) -> TriggerJob:
        """As ``TriggerClient.triggers.start_job``."""
        return await self._x.run(calls.start_trigger_job(
            action, calls.trigger_filter(tag, label, recipient, status), policy))

    async def backfill(self, trigger_id: str, from_: datetime | str,
                       to: datetime | str) -> TriggerJob:
        """As ``TriggerClient.triggers.backfill``."""
        return await self._x.run(calls.backfill(trigger_id, from_, to))

    async def job(self, job_id: str) -> TriggerJob:
        return await self._x.run(calls.get_trigger_job(job_id))

    async def wait_job(self, job_id: str, *, poll_s: float = 0.5,
                       on_progress: Callable[[TriggerJob], None] | None = None) -> TriggerJob:
        """Poll the job until it is done; ``on_progress`` sees every state."""
        while True:
            job = await self.job(job_id)
            if on_progress:
                on_progress(job)
            if job.finished:
                return job
            await self._x.sleep(poll_s)

    async def cancel(self, trigger_id: str) -> CancelledTrigger:
        return await self._x.run(calls.cancel(trigger_id))

    async def patch(self, trigger_id: str, **changes: Unpack[PatchFields]) -> Trigger:
        return await self._x.run(calls.patch(trigger_id, patch_body(changes)))

    async def snooze(self, trigger_id: str, *, delay_s: float | None = None,
                     fire_at: datetime | str | None = None,
                     local_time: datetime | str | None = None, time_zone: str | None = None,
                     dst_policy: DstPolicy | None = None, when: str | None = None,
                     idempotency_key: str | None = None) -> CreatedTrigger:
        body = snooze_body(delay_s=delay_s, fire_at=fire_at, local_time=local_time,
                           time_zone=time_zone, dst_policy=dst_policy, when=when)
        return await self._x.run(calls.snooze(trigger_id, body, idempotency_key))

    async def run(self, trigger_id: str, *, idempotency_key: str | None = None) -> RunStarted:
        """Fire the trigger now: a one-time trigger moves to now (same occurrence id); a
        series or a paused trigger gets an extra occurrence, a one-time copy firing now
        (``.run_trigger_id``). Once per ``idempotency_key`` (one is made if not given, so
        the SDK's own retries run it once)."""
        return await self._x.run(calls.run(trigger_id, idempotency_key))

    async def pause(self, trigger_id: str) -> Trigger:
        return await self._x.run(calls.pause(trigger_id))

    async def resume(self, trigger_id: str,
                     policy: CatchUpPolicy | str | None = None) -> Trigger:
        return await self._x.run(calls.resume(trigger_id, str(policy) if policy else None))

    async def ack(self, trigger_id: str, occurrence_id: str | None = None) -> AckResult:
        return await self._x.run(calls.ack(trigger_id, occurrence_id))


class AsyncDeadLetters:
    """As :class:`trigger_client.client.DeadLetters`."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    async def list_page(self, *, reason: str | None = None,
                        since: datetime | str | None = None,
                        until: datetime | str | None = None,
                        callback_prefix: str | None = None, caller: str | None = None,
                        limit: int | None = None, cursor: str | None = None) -> Page[DeadLetter]:
        return await self._x.run(calls.list_dead_letters(
            reason=reason, since=since, until=until, callback_prefix=callback_prefix,
            caller=caller, limit=limit, cursor=cursor))

    def list(self, *, reason: str | None = None, since: datetime | str | None = None,
             until: datetime | str | None = None, callback_prefix: str | None = None,
             caller: str | None = None,
             page_size: int | None = None) -> AsyncIterator[DeadLetter]:
        return aiterate(lambda c: self.list_page(
            reason=reason, since=since, until=until, callback_prefix=callback_prefix,
            caller=caller, limit=page_size, cursor=c))

    async def get(self, dead_letter_id: str) -> DeadLetter:
        return await self._x.run(calls.get_dead_letter(dead_letter_id))

    async def replay(self, dead_letter_id: str, *,
                     fire_at: datetime | str | None = None) -> ReplayResult:
        return await self._x.run(calls.replay_dead_letter(dead_letter_id, fire_at))

    async def purge(self, dead_letter_id: str) -> PurgeResult:
        return await self._x.run(calls.purge_dead_letter(dead_letter_id))

    async def replay_all(self, *, reason: str | None = None,
                         since: datetime | str | None = None,
                         until: datetime | str | None = None,
                         callback_prefix: str | None = None,
                         caller: str | None = None) -> ReplayJob:
        return await self._x.run(calls.start_bulk_replay(
            reason=reason, since=since, until=until, callback_prefix=callback_prefix,
            caller=caller))

    async def replay_job(self, job_id: str) -> ReplayJob:
        return await self._x.run(calls.get_bulk_replay(job_id))

    async def wait_replay(self, job_id: str, *, poll_s: float = 0.5,
                          on_progress: Callable[[ReplayJob], None] | None = None) -> ReplayJob:
        """Poll the job until it is done; ``on_progress`` sees every state."""
        while True:
            job = await self.replay_job(job_id)
            if on_progress:
                on_progress(job)
            if job.finished:
                return job
            await self._x.sleep(poll_s)


class AsyncInbox:
    """As :class:`trigger_client.client.Inbox`; ``stream`` reconnects by itself."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    async def list_page(self, recipient: str, *, unread: bool | None = None,
                        limit: int | None = None,
                        cursor: str | None = None) -> Page[InboxMessage]:
        return await self._x.run(calls.list_inbox(recipient, unread, limit, cursor))

    def list(self, recipient: str, *, unread: bool | None = None,
             page_size: int | None = None) -> AsyncIterator[InboxMessage]:
        return aiterate(lambda c: self.list_page(recipient, unread=unread, limit=page_size,
                                                 cursor=c))

    async def mark_read(self, recipient: str, message_id: str) -> None:
        await self._x.run(calls.mark_read(recipient, message_id))

    async def delete(self, recipient: str, message_id: str) -> None:
        await self._x.run(calls.delete_message(recipient, message_id))

    async def stream(self, recipient: str, *, last_event_id: str | None = None,
                     reconnect_delay_s: float = 1.0) -> AsyncGenerator[InboxMessage, None]:
        """New messages as they come, for as long as the caller iterates. When the stream
        ends or the connection drops, it reconnects after ``reconnect_delay_s`` with
        ``Last-Event-ID`` (the server then sends what was missed: none lost, none twice).
        An ``ApiError`` answer (401, 403, 400) ends it with that error."""
        while True:
            try:
                async for message in self._stream_once(recipient, last_event_id):
                    last_event_id = message.message_id
                    yield message
            except httpx.TransportError:
                pass  # dropped: reconnect below, from the last id seen
            await self._x.sleep(reconnect_delay_s)

    async def _stream_once(self, recipient: str,
                           last_event_id: str | None) -> AsyncIterator[InboxMessage]:
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        timeout = httpx.Timeout(DEFAULT_TIMEOUT_S, read=None)  # heartbeats keep it alive
        async with self._x.http.stream("GET", calls.stream_path(recipient), headers=headers,
                                       timeout=timeout) as resp:
            if resp.status_code >= 300:
                await resp.aread()
                raise error_from_response(resp)
            parser = SseParser()
            async for line in resp.aiter_lines():
                event = parser.feed(line)
                if event is not None and event.data:
                    yield InboxMessage.from_json(json.loads(event.data))


class AsyncOps:
    """As :class:`trigger_client.client.Ops`."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    async def audit(self, *, since: datetime | str | None = None, action: str | None = None,
              actor: str | None = None, cursor: str | None = None,
              limit: int | None = None) -> Page[AuditEntry]:
        """Operators and viewers: one page of every audit entry, newest first (``actor``:
        one caller's or operator's)."""
        return await self._x.run(calls.list_ops_audit(since=since, action=action, actor=actor,
                                              limit=limit, cursor=cursor))

    async def overview(self) -> OpsOverview:
        return await self._x.run(calls.ops_overview())

    async def stats(self) -> dict[str, int]:
        return await self._x.run(calls.stats())

    async def pause_caller(self, caller: str) -> dict[str, Any]:
        return await self._x.run(calls.pause_caller(caller))

    async def resume_caller(self, caller: str,
                            policy: CatchUpPolicy | str | None = None) -> ResumeJob:
        return await self._x.run(calls.resume_caller(caller, str(policy) if policy else None))

    async def paused_callers(self) -> list[PausedCaller]:
        return await self._x.run(calls.paused_callers())

    async def resume_job(self, job_id: str) -> ResumeJob:
        return await self._x.run(calls.resume_job(job_id))

    async def healthz(self) -> Health:
        return await self._x.run(calls.healthz())

    async def readyz(self) -> Health:
        return await self._x.run(calls.readyz())

    async def metrics(self) -> str:
        return await self._x.run(calls.metrics())

    async def openapi(self) -> dict[str, Any]:
        return await self._x.run(calls.openapi())

    async def show_ack_link(self, token: str) -> str:
        return await self._x.run(calls.show_ack_link(token))

    async def use_ack_link(self, token: str) -> str:
        return await self._x.run(calls.use_ack_link(token))


class AsyncRecipients:
    """``/v1/recipients``: as ``Recipients``."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    async def put(self, profile: Recipient) -> Recipient:
        return await self._x.run(calls.put_recipient(profile))

    async def get(self, recipient_id: str) -> Recipient:
        return await self._x.run(calls.get_recipient(recipient_id))

    async def delete(self, recipient_id: str) -> RecipientDeleted:
        return await self._x.run(calls.delete_recipient(recipient_id))

    async def list_page(self, *, limit: int | None = None, after: str | None = None
                        ) -> RecipientPage:
        return await self._x.run(calls.list_recipients(limit, after))

    async def list(self, *, page_size: int | None = None) -> AsyncIterator[Recipient]:
        after: str | None = None
        while True:
            page = await self.list_page(limit=page_size, after=after)
            for item in page.items:
                yield item
            if page.next_after is None:
                return
            after = page.next_after


class AsyncEndpoints:
    """As :class:`trigger_client.client.Endpoints`."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    async def enable(self, origin: str, replay_since: datetime | None = None
                     ) -> EndpointEnabled:
        return await self._x.run(endpoint_calls.enable_endpoint(origin, replay_since))

    async def list_all(self) -> list[EndpointHealth]:
        return await self._x.run(endpoint_calls.list_all_endpoints())

    async def enable_for(self, caller: str, origin: str,
                         replay_since: datetime | None = None) -> EndpointEnabled:
        return await self._x.run(
            endpoint_calls.enable_caller_endpoint(caller, origin, replay_since))

    # Last: the name shadows the builtin in the annotations below it.
    async def list(self) -> list[EndpointHealth]:
        return await self._x.run(endpoint_calls.list_endpoints())


class AsyncSubscriptions:
    """As :class:`trigger_client.client.Subscriptions`."""

    def __init__(self, x: _Executor) -> None:
        self._x = x

    async def put(self, name: str, url: str, events: Iterable[str]) -> EventSubscription:
        """Create or replace subscription ``name`` (``events``: ``subscriptions.EVENT_TYPES``)."""
        return await self._x.run(subscription_calls.put_subscription(name, url, events))

    async def delete(self, name: str) -> SubscriptionDeleted:
        return await self._x.run(subscription_calls.delete_subscription(name))

    async def failures(self, name: str) -> list[FailedEvent]:
        """The events given up on for ``name``, newest first."""
        return await self._x.run(subscription_calls.subscription_failures(name))

    # Last: the name shadows the builtin in the annotations below it.
    async def list(self) -> list[EventSubscription]:
        return await self._x.run(subscription_calls.list_subscriptions())


class AsyncSigning:
    def __init__(self, x: _Executor) -> None:
        self._x = x

    async def rotate(self) -> SigningSecret:
        return await self._x.run(calls.rotate_signing_secret())


class AsyncTriggerClient:
    """``AsyncTriggerClient(base_url=..., token=...)``; arguments as ``TriggerClient``
    (``sleep`` is a coroutine function)."""

    def __init__(self, base_url: str, token: str | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.http = httpx.AsyncClient(base_url=base_url, headers=base_headers(token),
                                      timeout=timeout_s, transport=transport)
        x = _Executor(self.http, retry or RetryPolicy(), sleep)
        self._x = x
        self.triggers = AsyncTriggers(x)
        self.dead_letters = AsyncDeadLetters(x)
        self.inbox = AsyncInbox(x)
        self.signing = AsyncSigning(x)
        self.recipients = AsyncRecipients(x)
        self.ops = AsyncOps(x)
        self.endpoints = AsyncEndpoints(x)
        self.subscriptions = AsyncSubscriptions(x)

    async def audit(self, *, since: datetime | str | None = None, action: str | None = None,
              cursor: str | None = None, limit: int | None = None) -> Page[AuditEntry]:
        """One page of this caller's own audit log, newest first: its mutating requests
        and how each was answered (``nextCursor`` goes on)."""
        return await self._x.run(calls.list_audit(since=since, action=action, limit=limit,
                                          cursor=cursor))

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncTriggerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
