"""The registering client: paced registrations, each with its own Idempotency-Key, retried
with the SAME request and key on any connection error, timeout, 5xx or 429."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.chaos.config import RunConfig
from bench.chaos.stack import now_ms

RETRYABLE = {429, 500, 502, 503, 504}
DOUBLE_EVERY = 10


def iso_ms(ms: int) -> str:
    t = time.gmtime(ms // 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{ms % 1000:03d}Z"


def parse_iso_ms(text: str) -> int:
    """``2026-11-23T07:00:01.234Z`` → epoch ms (the API always answers in this form)."""
    import calendar

    base, frac = text.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) * 1000 + int(frac[:3])


@dataclass
class KeyResult:
    """Everything the client learnt about one Idempotency-Key."""

    key: str
    index: int
    planned_fire_ms: int
    trigger_ids: set[str] = field(default_factory=set)
    fire_at_ms: int | None = None
    attempts: int = 0
    replays: int = 0
    sent_ms: int = 0
    answered_ms: int | None = None
    error: str | None = None
    fire_at_mismatch: bool = False


class Registrar:
    def __init__(self, cfg: RunConfig, token: str, run_id: str) -> None:
        self.cfg = cfg
        self.token = token
        self.run_id = run_id
        self.results: list[KeyResult] = []
        self.responses: Counter[str] = Counter()  # status code or exception name → count

    async def run(self, t0_ms: int) -> list[KeyResult]:
        """Register ``cfg.triggers`` evenly over ``cfg.register_s`` from ``t0_ms``."""
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        sem = asyncio.Semaphore(cfg.concurrency)
        timeout = aiohttp.ClientTimeout(total=cfg.request_timeout_s)
        connector = aiohttp.TCPConnector(limit=cfg.concurrency)
        tasks: list[asyncio.Task[None]] = []
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            for i in range(cfg.triggers):
                send_ms = t0_ms + int(i * cfg.register_s * 1000 / cfg.triggers)
                fire_ms = send_ms + int((cfg.min_delay_s + rng.random() * cfg.spread_s) * 1000)
                result = KeyResult(f"chaos-{self.run_id}-{i:05d}", i, fire_ms)
                self.results.append(result)
                wait_s = (send_ms - now_ms()) / 1000
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                # Every tenth key is sent twice at once, as a client whose retry races its
                # first attempt: both must be answered with the same trigger.
                for _ in range(2 if i % DOUBLE_EVERY == 0 else 1):
                    await sem.acquire()
                    task = asyncio.create_task(self.register(session, result))
                    task.add_done_callback(lambda _t: sem.release())
                    tasks.append(task)
            await asyncio.gather(*tasks)
        return self.results

    async def replay(self, every: int = DOUBLE_EVERY) -> int:
        """Send every ``every``-th key again (same body, same key) once registration is over,
        while the faults go on (a Redis flush leaves only Cassandra to answer): each must be
        answered with the trigger it already has. Returns how many were sent."""
        cfg = self.cfg
        sem = asyncio.Semaphore(cfg.concurrency)
        timeout = aiohttp.ClientTimeout(total=cfg.request_timeout_s)
        again = [r for r in self.results if r.trigger_ids and r.index % every == every // 2]

        async def one(r: KeyResult) -> None:
            async with sem:
                await self.register(session, r)

        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(one(r) for r in again))
        return len(again)

    async def register(self, session: aiohttp.ClientSession, r: KeyResult) -> None:
        body = {"callbackUrl": f"{self.cfg.receiver_prefix}cb/{r.index}",
                "payload": {"key": r.key, "i": r.index}, "fireAt": iso_ms(r.planned_fire_ms)}
        headers = {"Authorization": f"Bearer {self.token}", "Idempotency-Key": r.key}
        r.sent_ms = r.sent_ms or now_ms()
        deadline = time.monotonic() + self.cfg.retry_for_s
        while True:
            r.attempts += 1
            outcome = await self.post_once(session, body, headers, r)
            if outcome != "retry":
                return
            if time.monotonic() >= deadline:
                r.error = f"no answer after {r.attempts} attempts"
                return
            backoff = min(2.0, 0.1 * 2 ** min(r.attempts, 5))
            await asyncio.sleep(backoff * (0.5 + random.random() / 2))

    async def post_once(self, session: aiohttp.ClientSession, body: dict[str, Any],
                        headers: dict[str, str], r: KeyResult) -> str:
        """One attempt: ``done``, ``retry`` or ``error`` (a 4xx: a bug of the client or the
        service, never retried)."""
        try:
            async with session.post(f"{self.cfg.api_url}/v1/triggers", json=body,
                                    headers=headers) as resp:
                self.responses[str(resp.status)] += 1
                if resp.status in RETRYABLE:
                    await resp.read()
                    return "retry"
                data = await resp.json(content_type=None)
                if resp.status in (200, 201):
                    r.trigger_ids.add(data["triggerId"])
                    fire_at = parse_iso_ms(data["fireAt"])
                    if r.fire_at_ms is not None and r.fire_at_ms != fire_at:
                        r.fire_at_mismatch = True  # a replay must answer the same fireAt
                    r.fire_at_ms = r.fire_at_ms or fire_at
                    r.answered_ms = r.answered_ms or now_ms()
                    r.replays += resp.headers.get("Idempotent-Replayed") == "true"
                    return "done"
                r.error = f"{resp.status} {data}"
                return "error"
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            self.responses[type(e).__name__] += 1
            return "retry"
