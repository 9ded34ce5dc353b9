"""``/v1/triggers/jobs``: start a job over the caller's triggers matching a filter (cancel,
pause, resume) and read its progress; ``/v1/triggers/{id}/backfill``: start a job firing a
series' past occurrences in a range (read the same way). A caller's own triggers only."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.tags import parse_filter
from trigger_service.core.time.catchup import CatchUpPolicy
from trigger_service.core.time.timing import format_rfc3339_ms, parse_rfc3339_ms
from trigger_service.core.trigger_jobs import JobAction, TriggerJob
from trigger_service.http.auth import caller_of
from trigger_service.http.keys import TRIGGER_JOBS_KEY
from trigger_service.http.parsing import parse_json_body

_FIELDS = frozenset({"action", "filter", "policy"})
_FILTER_FIELDS = frozenset({"tag", "label", "recipient", "status"})
_BACKFILL_FIELDS = ("from", "to")
RESUME_POLICIES = tuple(p.value for p in CatchUpPolicy)  # what came due while paused


def parse_job_request(body: Any) -> tuple[JobAction, Any, str | None]:
    """(action, filter, policy) of a ``POST /v1/triggers/jobs`` body, or ``InvalidRequest``
    naming the field."""
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object")
    if extra := sorted(set(body) - _FIELDS):
        raise InvalidRequest(f"{extra[0]}: unknown field", field=extra[0])
    try:
        action = JobAction(str(body.get("action")))
    except ValueError as e:
        raise InvalidRequest(f"action: one of {', '.join(a.value for a in JobAction)}",
                             field="action") from e
    raw = body.get("filter")
    if not isinstance(raw, dict):
        raise InvalidRequest("filter: must be an object", field="filter")
    if extra := sorted(set(raw) - _FILTER_FIELDS):
        raise InvalidRequest(f"filter.{extra[0]}: unknown field", field="filter")
    policy = body.get("policy")
    if policy is not None and (action is not JobAction.RESUME or policy not in RESUME_POLICIES):
        raise InvalidRequest(f"policy: with action resume only, one of "
                             f"{', '.join(RESUME_POLICIES)}", field="policy")
    return action, parse_filter(raw, prefix="filter."), policy


def parse_backfill_request(body: Any) -> tuple[int, int]:
    """(from, to) in epoch ms of a ``POST /v1/triggers/{id}/backfill`` body, or
    ``InvalidRequest`` naming the field: both RFC 3339 instants, nothing else, from before
    to."""
    if not isinstance(body, dict):
        raise InvalidRequest("body: must be a JSON object with from and to")
    if extra := sorted(set(body) - set(_BACKFILL_FIELDS)):
        raise InvalidRequest(f"{extra[0]}: unknown field", field=extra[0])
    at: list[int] = []
    for name in _BACKFILL_FIELDS:
        raw = body.get(name)
        if not isinstance(raw, str):
            raise InvalidRequest(f"{name}: required, an RFC 3339 instant", field=name)
        try:
            at.append(parse_rfc3339_ms(raw))
        except ValueError as e:
            raise InvalidRequest(f"{name}: {e}", field=name) from e
    if at[0] >= at[1]:
        raise InvalidRequest("from: must be before to", field="from")
    return at[0], at[1]


def job_view(job: TriggerJob) -> dict[str, Any]:
    bf = job.backfill
    return {"jobId": job.job_id, "action": job.action.value, "state": job.status.value,
            "filter": job.filter.to_json(), "policy": job.policy, "matched": job.total,
            "done": job.done, "failed": job.failed,
            "createdAt": format_rfc3339_ms(job.created_at_ms),
            "backfill": None if bf is None else {
                "triggerId": bf.trigger_id, "from": format_rfc3339_ms(bf.from_ms),
                "to": format_rfc3339_ms(bf.to_ms), "paceMs": bf.pace_ms}}


async def start_job(request: web.Request) -> web.Response:
    caller = caller_of(request).name
    action, flt, policy = parse_job_request(parse_json_body(await request.read()))
    job = await request.app[TRIGGER_JOBS_KEY].start(caller, action, flt, policy)
    return web.json_response(job_view(job), status=202)


async def start_backfill(request: web.Request) -> web.Response:
    from_ms, to_ms = parse_backfill_request(parse_json_body(await request.read()))
    job = await request.app[TRIGGER_JOBS_KEY].start_backfill(
        caller_of(request), request.match_info["id"], from_ms, to_ms)
    return web.json_response(job_view(job), status=202)


async def get_job(request: web.Request) -> web.Response:
    job = await request.app[TRIGGER_JOBS_KEY].get(caller_of(request).name,
                                                  request.match_info["jobId"])
    return web.json_response(job_view(job))


def add_routes(app: web.Application) -> None:
    # Before ``/v1/triggers/{id}``: "jobs" is no trigger id.
    app.router.add_post("/v1/triggers/jobs", start_job)
    app.router.add_get("/v1/triggers/jobs/{jobId}", get_job)
    app.router.add_post("/v1/triggers/{id}/backfill", start_backfill)
