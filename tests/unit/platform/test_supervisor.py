"""The process supervisor's exit codes (signals are real: SIGTERM to this process)."""

from __future__ import annotations

import asyncio
import os
import signal

from trigger_service.platform.supervisor import supervise


async def drains_at_once(stop: asyncio.Event) -> None:
    await stop.wait()


async def test_a_sigterm_with_a_quick_drain_exits_0() -> None:
    # The runners return in the same loop turn as the signal: not "stopped unexpectedly".
    for _ in range(20):
        asyncio.get_running_loop().call_later(0.01, os.kill, os.getpid(), signal.SIGTERM)
        assert await supervise({"a": drains_at_once, "b": drains_at_once}) == 0


async def test_a_runner_that_returns_before_the_signal_fails_the_process() -> None:
    async def quits(stop: asyncio.Event) -> None:
        return

    assert await supervise({"quits": quits, "waits": drains_at_once}) == 1


async def test_a_runner_that_raises_while_draining_fails_the_process() -> None:
    async def breaks(stop: asyncio.Event) -> None:
        await stop.wait()
        raise RuntimeError("drain failed")

    asyncio.get_running_loop().call_later(0.01, os.kill, os.getpid(), signal.SIGTERM)
    assert await supervise({"breaks": breaks}) == 1
