"""``make bench`` (part): a 1,000-reminder burst on four channels against the stack ``make up``
started. Every reminder has an email, an SMS, a push and an inbox channel, all due at the same
instant. The providers are this script's own (an SMTP server, Twilio- and FCM-format APIs from
``tests/providers.py``), so each arrival is timed where it lands; the service's processes are
restarted pointing at them, and put back as ``make up`` made them at the end. An SSE client
streams the inbox recipient through the API.

Prints per channel: delivered, missing, early, duplicates, lag p50/p99/max (arrival - fire
time), and the SSE latency (event received - fire time); JSON in
``bench/results/channels.json``. A measurement: the exit status is 0 even if targets are missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import API, RESULTS, pct, restart_app  # noqa: E402
from tests.providers import PushSimulator, SmsSimulator, SmtpSink  # noqa: E402

TOKEN = os.environ.get("BENCH_TOKEN", "dev-token")
RECIPIENT = "bench-inbox"
LEAD_MS = 25_000  # registration of 1,000 four-channel reminders fits in this
CONCURRENCY = 32


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Timed(SmtpSink):
    """The SMTP sink, remembering when each message arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived_ms: list[int] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        answer = await super().handle_DATA(server, session, envelope)
        self.arrived_ms.append(now_ms())
        return answer


def body(i: int, fire_at: str) -> dict[str, Any]:
    return {"fireAt": fire_at, "payload": {"i": i}, "channels": [
        {"type": "email", "to": f"user{i}@example.com", "subject": "Reminder", "text": "Now"},
        {"type": "sms", "to": f"+4915{i:09d}", "text": "Reminder"},
        {"type": "push", "token": f"bench-{i}", "title": "Reminder", "body": "Now"},
        {"type": "inbox", "recipient": RECIPIENT, "title": "Reminder", "body": f"#{i}"}]}


async def register(session: aiohttp.ClientSession, n: int, fire_ms: int) -> dict[str, int]:
    fire_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(fire_ms // 1000)) \
        + f".{fire_ms % 1000:03d}Z"
    todo = list(range(n))
    out: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def worker() -> None:
        while todo:
            i = todo.pop()
            async with session.post(f"{API}/v1/triggers", json=body(i, fire_at),
                                    headers=headers | {"Idempotency-Key": f"ch-{fire_ms}-{i}"}
                                    ) as r:
                if r.status == 201:
                    out[(await r.json())["triggerId"]] = fire_ms

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return out


async def stream(session: aiohttp.ClientSession, seen: dict[str, int],
                 ready: asyncio.Event) -> None:
    async with session.get(f"{API}/v1/inbox/{RECIPIENT}/stream",
                           headers={"Authorization": f"Bearer {TOKEN}"},
                           timeout=aiohttp.ClientTimeout(total=None)) as r:
        ready.set()
        async for raw in r.content:
            line = raw.decode().strip()
            if line.startswith("data:"):
                seen.setdefault(json.loads(line[5:])["triggerId"], now_ms())


def summary(arrivals: dict[str, list[int]], fires: dict[str, int]) -> dict[str, Any]:
    lags = [min(ts) - fires[t] for t, ts in arrivals.items() if t in fires]
    return {"delivered": len(lags), "missing": len(fires) - len(lags),
            "early": sum(1 for x in lags if x < 0),
            "duplicates": sum(len(ts) - 1 for t, ts in arrivals.items() if t in fires),
            "lag_ms": {"p50": round(pct(lags, 0.5), 1), "p99": round(pct(lags, 0.99), 1),
                       "max": max(lags) if lags else None}}


async def measure(n: int, smtp: Timed, sms: SmsSimulator, push: PushSimulator) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=CONCURRENCY * 2)
    async with aiohttp.ClientSession(connector=connector) as session:
        sse: dict[str, int] = {}
        ready = asyncio.Event()
        reader = asyncio.create_task(stream(session, sse, ready))
        await asyncio.wait_for(ready.wait(), 10)
        start = now_ms()
        fire_ms = start + LEAD_MS
        fires = await register(session, n, fire_ms)
        reg_s = (now_ms() - start) / 1000
        print(f"registered {len(fires)} in {reg_s:.1f}s; waiting for 4 x {len(fires)} "
              "deliveries...", flush=True)
        deadline = fire_ms + 120_000

        def done() -> bool:
            return min(len(smtp.messages), len(sms.requests), len(push.requests),
                       len(sse)) >= len(fires)

        for _ in range(10_000):  # polled: the providers have no "all arrived" event
            if now_ms() >= deadline or done():
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)  # late duplicates
        reader.cancel()
    by_phone = {f"+4915{i:09d}": i for i in range(n)}
    index_to_tid: dict[int, str] = {}
    email: dict[str, list[int]] = defaultdict(list)
    for mail, at in zip(smtp.messages, smtp.arrived_ms, strict=True):
        tid = str(mail.message["Message-ID"]).strip("<>").split(".")[0]
        email[tid].append(at)
    push_at: dict[str, list[int]] = defaultdict(list)
    for r in push.requests:
        if r.status < 300:
            push_at[r.body["message"]["data"]["triggerId"]].append(r.at_ms)
            index_to_tid[int(r.body["message"]["token"].split("-")[1])] = \
                r.body["message"]["data"]["triggerId"]
    sms_at: dict[str, list[int]] = defaultdict(list)
    for r in sms.requests:
        i = by_phone.get(r.body.get("To", ""))
        if r.status < 300 and i is not None and i in index_to_tid:
            sms_at[index_to_tid[i]].append(r.at_ms)
    return {"reminders": n, "registered": len(fires),
            "registration_per_s": round(len(fires) / reg_s, 1),
            "email": summary(email, fires), "sms": summary(sms_at, fires),
            "push": summary(push_at, fires),
            "inbox_sse": summary({t: [at] for t, at in sse.items()}, fires)}


async def run(n: int) -> dict[str, Any]:
    smtp, sms, push = Timed(), SmsSimulator(), PushSimulator()
    smtp_port = await smtp.start()
    sms_url, push_url = await sms.start(), await push.start()
    env = {"TRIGGER_SMTP_HOST": "127.0.0.1", "TRIGGER_SMTP_PORT": str(smtp_port),
           "TRIGGER_SMS_BASE_URL": sms_url, "TRIGGER_PUSH_BASE_URL": push_url}
    try:
        await asyncio.to_thread(restart_app, env)
        return await measure(n, smtp, sms, push)
    finally:
        await asyncio.to_thread(restart_app, {})
        await sms.stop()
        await push.stop()
        await smtp.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=1000, help="reminders (four channels each)")
    result = asyncio.run(run(p.parse_args().n))
    result["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                         "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"\n{'channel':10} {'deliv':>6} {'miss':>5} {'dup':>4} {'early':>5} {'p50':>8} "
          f"{'p99':>8} {'max':>8}")
    for ch in ("email", "sms", "push", "inbox_sse"):
        r = result[ch]
        lag = r["lag_ms"]
        print(f"{ch:10} {r['delivered']:>6} {r['missing']:>5} {r['duplicates']:>4} "
              f"{r['early']:>5} {lag['p50']:>8} {lag['p99']:>8} {lag['max']!s:>8}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "channels.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nlag = arrival at the provider (SSE: event at the client) - fireAt, in ms; "
          f"registration {result['registration_per_s']}/s; JSON in bench/results/channels.json")


if __name__ == "__main__":
    main()
