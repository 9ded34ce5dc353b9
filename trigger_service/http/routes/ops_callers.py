"""``/v1/ops/callers``: operators pause and resume a whole caller (``app.caller_pause``);
operators and viewers list the paused callers and read a resume job's progress."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from trigger_service.app.caller_pause import CallerPauseService
from trigger_service.core.errors import NotFound
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.core.trigger_jobs import TriggerJob
from trigger_service.http.auth import require_ops
from trigger_service.http.keys import RUNTIME_KEY
from trigger_service.http.routes.triggers import resume_policy

PAUSES_KEY = web.AppKey("caller_pauses", CallerPauseService)


def _known(request: web.Request) -> str:
    name = request.match_info["caller"]
    if request.app[RUNTIME_KEY].callers.by_name(name) is None:
        raise NotFound(f"no caller {name}")
    return name


def resume_job_view(job: TriggerJob) -> dict[str, Any]:
    return {"jobId": job.job_id, "caller": job.caller, "status": job.status.value,
            "total": job.total, "done": job.done, "failed": job.failed,
            "createdAt": format_rfc3339_ms(job.created_at_ms)}


async def pause_caller(request: web.Request) -> web.Response:
    require_ops(request, write=True)
    name = _known(request)
    at_ms = await request.app[PAUSES_KEY].pause(name)
    return web.json_response({"caller": name, "paused": True,
                              "pausedAt": format_rfc3339_ms(at_ms)})


async def resume_caller(request: web.Request) -> web.Response:
    require_ops(request, write=True)
    name = _known(request)
    policy = resume_policy(await request.read())
    job = await request.app[PAUSES_KEY].resume(name, policy)  # started: its runner has it
    return web.json_response(resume_job_view(job), status=202)


async def paused_callers(request: web.Request) -> web.Response:
    require_ops(request)
    rows = await request.app[PAUSES_KEY].paused()
    return web.json_response({"items": [
        {"caller": c, "pausedAt": format_rfc3339_ms(at_ms), "pausedTriggers": n}
        for c, at_ms, n in rows]})


async def resume_job(request: web.Request) -> web.Response:
    require_ops(request)
    job = await request.app[PAUSES_KEY].job(request.match_info["job"])
    return web.json_response(resume_job_view(job))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/ops/callers/paused", paused_callers)
    app.router.add_get("/v1/ops/callers/resume-jobs/{job}", resume_job)
    app.router.add_post("/v1/ops/callers/{caller}/pause", pause_caller)
    app.router.add_post("/v1/ops/callers/{caller}/resume", resume_caller)
