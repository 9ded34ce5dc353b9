"""SIGHUP reloads the callers of a running process (``platform.process.watch_callers``): a
real signal to this process, the handler on the event loop."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from tests.fake_runtime import fake_runtime
from tests.unit.app.support import make_env
from tests.unit.config.test_live_callers import write
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.config.live_callers import LiveCallers
from trigger_service.platform.process import watch_callers


async def hup_and_wait_for(event: str, logs: list[MutableMapping[str, Any]],
                           ) -> MutableMapping[str, Any]:
    os.kill(os.getpid(), signal.SIGHUP)
    for _ in range(500):  # the handler runs on the loop's next turn after the signal
        found = [e for e in logs if e["event"] == event]
        if found:
            logs.clear()
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {event} after SIGHUP: {logs}")


async def test_sighup_reloads_the_callers_and_a_bad_file_keeps_them(tmp_path: Path) -> None:
    env = make_env()
    path = write(tmp_path / "callers.toml", "revoked", "kept")
    live = LiveCallers.load(path)
    runtime = fake_runtime(env.settings, live, env.store, env.queue, env.cache,
                           MemoryLease(env.clock, 10_000), env.clock, env.metrics)
    unwatch = watch_callers(runtime)
    try:
        with capture_logs() as logs:
            path.write_text("[callers.c0\n")  # not TOML
            failed = await hup_and_wait_for("callers_reload_failed", logs)
            assert "callers.toml" in str(failed["error"])
            assert runtime.callers.principal("revoked") is not None

            write(path, "kept")
            await hup_and_wait_for("callers_reloaded", logs)
            assert runtime.callers.principal("revoked") is None
            assert runtime.callers.principal("kept") is not None
    finally:
        unwatch()
