"""What the audit log records of each request: the one place routes are mapped onto audit
actions (``AUDITED``) and answers onto outcomes (``audit_middleware``). The recording itself
is ``app.audit.AuditTrail``'s.

An audited route is a mutating one of a caller or an operator. The entry is made after the
answer is decided (the response, or the error the error middleware will render), so a refusal
(``409 not_cancellable``, ``403 forbidden``, ``429 quota_exceeded``) is recorded with its
code. Requests the rate limit or the connection share refused never reach it (they sit
outside it): a caller's flood costs the log nothing, and cannot crowd out another caller's
entries (the writes in flight are bounded, ``TRIGGER_AUDIT_MAX_PENDING``, for all callers).
Creates are counted, not logged, unless ``TRIGGER_AUDIT_CREATES``: then a single create is
one entry (target: the new trigger's id) and a batch create one entry for the batch (target
``batch``). A job over triggers by filter (``POST /v1/triggers/jobs``: its action ``cancel``,
``pause`` or ``resume``) and a bulk replay are one entry each, the target the job's id.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from trigger_service.app.audit import AuditTrail
from trigger_service.core.audit import OUTCOME_OK, AuditAction
from trigger_service.core.errors import AdapterError, ApiError, DependencyUnavailable
from trigger_service.http.guards import request_id_of
from trigger_service.http.keys import PRINCIPAL_KEY

A = AuditAction
Json = dict[str, Any]
# (request, its parsed JSON body or {}, the answer's JSON or {}) → the entry's target
Target = Callable[[web.Request, Json, Json], str]
_JOB_ACTIONS = {a.value: a for a in (A.CANCEL, A.PAUSE, A.RESUME)}
# The fallback codes of answers not raised as ApiError (aiohttp's own, errors_middleware).
_STATUS_CODES = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed",
                 413: "payload_too_large", 415: "unsupported_media_type"}


def _match(name: str) -> Target:
    return lambda request, body, answer: request.match_info.get(name, "")


def _answer(name: str, default: str = "") -> Target:
    return lambda request, body, answer: str(answer.get(name) or default)


def _origin(request: web.Request, body: Json, answer: Json) -> str:
    return str(body.get("origin") or answer.get("origin") or "")[:300]


def _principal(request: web.Request, body: Json, answer: Json) -> str:
    return request[PRINCIPAL_KEY].name


@dataclass(frozen=True, slots=True)
class Audited:
    """An audited route: its action (None: taken from the body's ``action``, a job over
    triggers) and where its target is; ``create``: logged only with TRIGGER_AUDIT_CREATES;
    ``needs_body``: the target or action is in the request's JSON body."""

    action: AuditAction | None
    target: Target
    create: bool = False
    needs_body: bool = False


# (method, route pattern) → what the entry says.
AUDITED: dict[tuple[str, str], Audited] = {
    ("POST", "/v1/triggers"): Audited(A.CREATE, _answer("triggerId"), create=True),
    ("POST", "/v1/triggers/batch"): Audited(A.CREATE, lambda r, b, a: "batch", create=True),
    ("DELETE", "/v1/triggers/{id}"): Audited(A.CANCEL, _match("id")),
    ("PATCH", "/v1/triggers/{id}"): Audited(A.PATCH, _match("id")),
    ("POST", "/v1/triggers/{id}/snooze"): Audited(A.PATCH, _match("id")),
    ("POST", "/v1/triggers/{id}/pause"): Audited(A.PAUSE, _match("id")),
    ("POST", "/v1/triggers/{id}/resume"): Audited(A.RESUME, _match("id")),
    ("POST", "/v1/triggers/{id}/run"): Audited(A.RUN, _match("id")),
    ("POST", "/v1/ops/triggers/{id}/run"): Audited(A.RUN, _match("id")),
    ("POST", "/v1/triggers/{id}/backfill"): Audited(A.BACKFILL, _match("id")),
    ("POST", "/v1/triggers/jobs"): Audited(None, _answer("jobId"), needs_body=True),
    ("POST", "/v1/dead-letters/replay"): Audited(A.REPLAY, _answer("jobId")),
    ("POST", "/v1/dead-letters/{id}/replay"): Audited(A.REPLAY, _match("id")),
    ("DELETE", "/v1/dead-letters/{id}"): Audited(A.PURGE, _match("id")),
    ("POST", "/v1/signing-secrets/rotate"): Audited(A.ROTATE_SECRET, _principal),
    ("PUT", "/v1/recipients/{id}"): Audited(A.RECIPIENT_PUT, _match("id")),
    ("DELETE", "/v1/recipients/{id}"): Audited(A.RECIPIENT_DELETE, _match("id")),
    ("POST", "/v1/endpoints/enable"): Audited(A.ENDPOINT_ENABLE, _origin, needs_body=True),
    ("POST", "/v1/ops/endpoints/{caller}/enable"): Audited(A.ENDPOINT_ENABLE, _origin,
                                                           needs_body=True),
    ("POST", "/v1/ops/callers/{caller}/pause"): Audited(A.CALLER_PAUSE, _match("caller")),
    ("POST", "/v1/ops/callers/{caller}/resume"): Audited(A.CALLER_RESUME, _match("caller")),
    ("PUT", "/v1/event-subscriptions/{name}"): Audited(A.SUBSCRIPTION_PUT, _match("name")),
    ("DELETE", "/v1/event-subscriptions/{name}"): Audited(A.SUBSCRIPTION_DELETE,
                                                          _match("name")),
}


def audit_middleware(trail: AuditTrail) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Records each audited request (``AUDITED``) of an authenticated principal once its
    answer is decided; inside the auth middleware (it needs the principal) and the rate
    limit (a refused flood writes nothing), outside the other guards (their refusals, a
    CPU share or a body's deadline, are recorded too). Adds no wait: the write is in the
    background."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        audited = (AUDITED.get((request.method, resource.canonical))
                   if resource is not None and PRINCIPAL_KEY in request else None)
        if audited is None:
            return await handler(request)
        outcome = "internal_error"
        response: web.StreamResponse | None = None
        try:
            response = await handler(request)
            outcome = _outcome(response)
            return response
        except ApiError as e:
            outcome = e.code
            raise
        except AdapterError:
            outcome = DependencyUnavailable.code
            raise
        except web.HTTPException as e:
            outcome = _STATUS_CODES.get(e.status, "http_error") if e.status >= 400 else OUTCOME_OK
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"  # the client went away; what was done is still recorded
            raise
        finally:
            await _record(trail, request, audited, response, outcome)

    return middleware


def _outcome(response: web.StreamResponse) -> str:
    if response.status < 400:
        return OUTCOME_OK
    return str(_json_of(response).get("error") or _STATUS_CODES.get(response.status, "error"))


async def _record(trail: AuditTrail, request: web.Request, audited: Audited,
                  response: web.StreamResponse | None, outcome: str) -> None:
    principal = request[PRINCIPAL_KEY]
    if audited.create and not trail.logs_creates:
        if outcome == OUTCOME_OK:
            trail.count_create()
        return
    # A cancelled request awaits nothing more (its body may never have been read).
    body = await _body_of(request) if audited.needs_body and outcome != "cancelled" else {}
    action = audited.action or _JOB_ACTIONS.get(str(body.get("action")))
    if action is None:  # a job refused for its action: it names no action to record
        return
    answer = _json_of(response) if response is not None else {}
    trail.record(actor=principal.name,
                 caller=principal.caller.name if principal.caller is not None else None,
                 action=action, target=audited.target(request, body, answer)[:300],
                 request_id=request_id_of(request), outcome=outcome)


async def _body_of(request: web.Request) -> Json:
    # The handler read the body already (aiohttp keeps it); unreadable or not JSON: nothing.
    try:
        body = json.loads(await request.read()) if request.body_exists else {}
    except (ValueError, OSError, web.HTTPException):
        return {}
    return body if isinstance(body, dict) else {}


def _json_of(response: web.StreamResponse | None) -> Json:
    if not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return {}
    try:
        value = json.loads(response.body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
