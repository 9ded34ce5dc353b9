"""``python -m trigger_service``: the HTTP API. Settings → wiring → supervise."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import structlog
from aiohttp import web

from trigger_service.app import costly_pool
from trigger_service.app.quota import QuotaGate
from trigger_service.app.replay_jobs import POLL_S
from trigger_service.app.triggers import TriggerService
from trigger_service.core.time.when import warm_up
from trigger_service.http.app import build_app
from trigger_service.http.keys import JOBS_KEY, RECIPIENTS_KEY, TRIGGER_JOBS_KEY
from trigger_service.http.server import GuardedAppRunner
from trigger_service.platform.process import Component, main_for
from trigger_service.platform.supervisor import every
from trigger_service.platform.wiring import Runtime

log = structlog.get_logger("trigger_service")

ZONE_PASS_S = 1.0  # a recipient's zone change reaches a trigger the PUT missed within this


async def build(runtime: Runtime) -> Component:
    s = runtime.settings
    quota = QuotaGate(runtime.quota, lambda name: getattr(
        runtime.callers.by_name(name), "max_pending", None), runtime.metrics)
    service = TriggerService(s, runtime.store, runtime.store, runtime.queue, runtime.cache,
                             runtime.clock, runtime.metrics, quota, resolver=runtime.resolver,
                             budget=runtime.budget, recipients=runtime.recipients,
                             debounce_heads=runtime.store)
    app = build_app(runtime, service)
    runner = GuardedAppRunner(app, s.limits, runtime.metrics, access_log=None,
                              handle_signals=False)
    await runner.setup()
    # Several API processes share the port (infra/app.sh exports how many): each binds with
    # SO_REUSEPORT. One alone (or run by hand: 0) does not, so a second copy started by
    # mistake fails to bind instead of sharing silently.
    site = web.TCPSite(runner, s.api.host, s.api.port, backlog=1024,
                       reuse_port=s.api.workers > 1)

    async def http(stop: asyncio.Event) -> None:
        # dateparser's first use takes about a second, and so does the costly callers'
        # worker's start (imports, its own warm-up): both before the port opens, so neither
        # is paid inside a request, and a first costly caller meets the worker up.
        worker = costly_pool.worker_started()
        await asyncio.to_thread(warm_up)
        await _worker_up(worker)
        await site.start()
        log.info("api_listening", url=f"http://{s.api.host}:{s.api.port}")
        await stop.wait()
        # Drain: stop accepting and let in-flight requests finish, then the sends that
        # outlived their request; closing the runtime flushes what the adapter still batches.
        await runner.cleanup()
        await service.drain()
        # The costly callers' worker, if one started: no request needs it any more (a
        # section still running ends within its bound). atexit would too, later.
        await asyncio.to_thread(costly_pool.shutdown)

    jobs, trigger_jobs = app[JOBS_KEY], app[TRIGGER_JOBS_KEY]

    async def replay_jobs(stop: asyncio.Event) -> None:
        # Resumes bulk replays whose runner died (the POST starts new ones at once).
        await every(stop, POLL_S, jobs.poll, name="replay_jobs")
        jobs.cancel()

    async def resume_trigger_jobs(stop: asyncio.Event) -> None:
        # Resumes jobs over triggers whose runner died (the POST starts new ones at once).
        await every(stop, POLL_S, trigger_jobs.poll, name="trigger_jobs")
        trigger_jobs.cancel()

    profiles = app[RECIPIENTS_KEY]

    async def recipient_zones(stop: asyncio.Event) -> None:
        # Completes the zone changes a PUT left unfinished (a crash, a trigger in flight).
        await every(stop, ZONE_PASS_S, profiles.run_once, name="recipient_zones")

    return Component({"http": http, "replay_jobs": replay_jobs,
                      "trigger_jobs": resume_trigger_jobs,
                      "recipient_zones": recipient_zones}, report=False)


async def _worker_up(started: Future[int] | None) -> None:
    """Wait for the worker's start; one that fails leaves costly sections to a thread
    (``app/costly_pool.py``), which the log says, and the API still opens."""
    if started is None:
        return
    try:
        pid = await asyncio.wrap_future(started)
    except Exception as e:  # the pool's own start failed: not a reason to stay closed
        log.warning("costly_worker_not_started", error=repr(e))
    else:
        log.info("costly_worker_started", pid=pid)


def main() -> None:
    main_for("trigger_service", build)


if __name__ == "__main__":
    main()
