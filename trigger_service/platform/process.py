"""What every ``python -m <component>`` entry point shares: settings from the environment
(bad ones exit 2 naming the variable), logging, the event loop, the runtime, the supervisor
and a periodic report line.

The loop is uvloop (libuv): it roughly halves the event loop's own CPU per request and per
cross-thread wake-up (every Cassandra response arrives from the driver's I/O thread), and CPU
is the limit on this 2-core machine. Tests keep asyncio's default loop, so everything also
works without it."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
import uvloop
from aiohttp import web

from trigger_service.config.live_callers import LiveCallers
from trigger_service.config.production import check_production
from trigger_service.config.settings import Settings
from trigger_service.core.errors import AdapterError, ConfigError, TriggerError
from trigger_service.platform.counters import CounterFlusher
from trigger_service.platform.heap import settle_heap
from trigger_service.platform.logs import configure_logging, log_notices
from trigger_service.platform.metrics import CONTENT_TYPE, metrics_authorized
from trigger_service.platform.supervisor import Runner, every, supervise
from trigger_service.platform.wiring import Runtime

REPORT_EVERY_S = 60


@dataclass
class Component:
    """What a process runs on its runtime: named loops, a report of its state, a close."""

    runners: dict[str, Runner]
    status: Callable[[], dict[str, object]] = dict
    close: Callable[[], Awaitable[None]] | None = None
    grace_s: float = 15.0
    report: bool = True
    metrics_port: int = 0  # its own /metrics (0: none)


Build = Callable[[Runtime], Awaitable[Component]]


async def serve_component(name: str, settings: Settings, build: Build) -> int:
    """Open the runtime, build the component, supervise it until SIGTERM, close everything."""
    log = structlog.get_logger(name)
    runtime = await Runtime.open(settings, "api" if name == "trigger_service" else name)
    counters = CounterFlusher(runtime.metrics, runtime.store)
    component: Component | None = None
    unwatch = watch_callers(runtime)
    try:
        component = await build(runtime)
        runners = {**component.runners, "counters": counters.run}
        if component.metrics_port:
            runners["metrics_http"] = metrics_server(runtime, component.metrics_port)
        if component.report:
            runners["report"] = _reporter(log, name, runtime, component)
        log.info(f"{name}_started", **component.status())
        settle_heap()
        return await supervise(runners, grace_s=component.grace_s)
    finally:
        unwatch()
        if component is not None:
            log.info(f"{name}_stopped", **component.status(), **runtime.metrics.snapshot())
            if component.close is not None:
                await component.close()
        # The last counts, after every loop has drained.
        try:
            await counters.flush()
        except AdapterError as e:
            log.warning("counters_not_flushed", error=str(e))
        await runtime.close()


def watch_callers(runtime: Runtime) -> Callable[[], None]:
    """Reload the callers file on SIGHUP (``LiveCallers.reload``), without a restart: a
    revoked token fails from the next request on. Both outcomes are logged; a file that does
    not load (or that production refuses) leaves the callers in use. Returns the undo."""
    callers = runtime.callers
    if not isinstance(callers, LiveCallers):
        return lambda: None  # a fixed registry (tests): nothing to reload
    log = structlog.get_logger("callers")

    def reload() -> None:
        try:
            registry = callers.reload()
        except ConfigError as e:
            log.error("callers_reload_failed", file=str(callers.path), error=str(e))
            return
        log.info("callers_reloaded", file=str(callers.path),
                 principals=len(registry.token_hashes()))

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reload)

    def unwatch() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return unwatch


def metrics_server(runtime: Runtime, port: int) -> Runner:
    """``GET /metrics`` on ``port``: this process's series. A port that cannot be bound (in
    use) is logged and the process goes on without it: metrics are not worth a crash loop."""
    log = structlog.get_logger("metrics")
    host = runtime.settings.metrics_host

    async def page(request: web.Request) -> web.Response:
        if not metrics_authorized(request.headers.get("Authorization", ""),
                                  runtime.settings.metrics_token):
            return web.json_response({"error": "unauthorized",
                                      "message": "missing or wrong metrics token"}, status=401)
        return web.Response(body=runtime.metrics.exposition(),
                            headers={"Content-Type": CONTENT_TYPE})

    async def serve(stop: asyncio.Event) -> None:
        app = web.Application()
        app.router.add_get("/metrics", page)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
            log.info("metrics_listening", url=f"http://{host}:{port}/metrics")
        except OSError as e:
            log.error("metrics_port_unavailable", host=host, port=port, error=str(e))
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    return serve


def _reporter(log: Any, name: str, runtime: Runtime, component: Component) -> Runner:
    async def report(stop: asyncio.Event) -> None:
        async def line() -> None:
            log.info(f"{name}_metrics", **component.status(), **runtime.metrics.snapshot())

        await every(stop, REPORT_EVERY_S, line, name="report")

    return report


def run_process(name: str, serve: Callable[[Settings], Coroutine[Any, Any, int]]) -> None:
    """Build the settings, configure logging, run ``serve`` and exit with its code."""
    try:
        settings = Settings.from_env()
        configure_logging(settings.log_level, settings.log_format)
        log_notices(name, settings.notices)  # before the check, which may refuse to start
        check_production(settings)
    except TriggerError as e:
        print(f"{name}: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(uvloop.run(serve(settings)))
    except TriggerError as e:
        structlog.get_logger(name).error("startup_failed", error=str(e))
        sys.exit(1)


def main_for(name: str, build: Build) -> None:
    """The whole ``main()`` of a component's ``__main__``."""
    run_process(name, lambda settings: serve_component(name, settings, build))
