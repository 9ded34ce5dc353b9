"""``python -m bench.chaos``: registrations, deliveries and faults at once, against the stack
of ``make up`` (its dependencies; the service's processes are restarted with the run's own
settings, and stopped at the end: ``make up`` restores the normal stack).

Full form: 3,000 triggers registered over 30 s, fire times 5-65 s after registration, a
fault every 5 s cycling through every kind. ``--short`` (CI): 500 triggers over 10 s, fire
times 5-35 s out, each kind once. Exit status 1 when a target is missed."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from bench.chaos import report
from bench.chaos.config import ROOT, SHORT_ENV, TIER_ENV, VAR, RunConfig, process_env
from bench.chaos.faults import KINDS, Injector, Watcher, schedule
from bench.chaos.load import Registrar
from bench.chaos.receiver import Delivery, ReceiverProcess
from bench.chaos.stack import APPS, SUPERVISOR_LOG, Stack, now_ms

SHORT = {"triggers": 500, "register_s": 10.0, "spread_s": 30.0, "fault_every_s": 6.0,
         "settle_s": 45.0}


def parse_args(argv: list[str] | None) -> RunConfig:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--short", action="store_true", help="the CI form: 500 triggers, each "
                   "fault once (about 2 minutes)")
    p.add_argument("--triggers", type=int, help="triggers to register (3000; short 500)")
    p.add_argument("--register-s", type=float, help="seconds to register them over (30)")
    p.add_argument("--spread-s", type=float, help="fire times 5 s + [0, this) after each "
                   "registration (60)")
    p.add_argument("--fault-every-s", type=float, help="seconds between faults (5)")
    p.add_argument("--api-port", type=int, default=8180, help="the run's API port (8180)")
    p.add_argument("--receiver-port", type=int, default=9180, help="its receiver (9180)")
    p.add_argument("--out", type=Path, help="JSON report (bench/results/chaos-<UTC stamp>.json)")
    a = p.parse_args(argv)
    cfg = RunConfig(short=a.short, api_port=a.api_port, receiver_port=a.receiver_port)
    if a.short:
        cfg = replace(cfg, **SHORT)  # type: ignore[arg-type]
    overrides = {"triggers": a.triggers, "register_s": a.register_s, "spread_s": a.spread_s,
                 "fault_every_s": a.fault_every_s}
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    if a.out is not None:
        cfg = replace(cfg, out=a.out.resolve())
    return cfg


def say(text: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {text}", flush=True)


def prepare(cfg: RunConfig, token: str) -> tuple[Stack, int]:
    """Dependencies up, the developer's app processes down, an empty keyspace and queues, the
    run's callers file, then the app processes with the run's settings."""
    stack = Stack(cfg, process_env(cfg, 1))
    say(f"starting the dependencies (infra/up.sh; log {SUPERVISOR_LOG.relative_to(ROOT)})")
    stack.run("up.sh")
    ring = stack.ring_nodes()
    stack.env = process_env(cfg, ring)
    say(f"cassandra: {ring} node(s); stopping the service's processes (infra/app.sh down)")
    stack.run("app.sh", "down")
    for stray in stack.strays():
        say(f"warning: a service process of this checkout that no PID file names: {stray}")
    stack.drop_keyspace()
    stack.delete_queues()
    stack.write_callers(token)
    say(f"starting the service with the run's settings on :{cfg.api_port} (infra/app.sh up)")
    stack.run("app.sh", "up")
    return stack, ring


async def wait_delivered(receiver: ReceiverProcess, registrar: Registrar, settle_s: float) -> None:
    ids = {t for r in registrar.results for t in r.trigger_ids}
    fires = [r.fire_at_ms for r in registrar.results if r.fire_at_ms is not None]
    last_fire = max(fires, default=now_ms())
    deadline = last_fire + int(settle_s * 1000)
    while now_ms() < deadline:
        if now_ms() > last_fire + 2000 and ids <= await receiver.delivered_ids():
            break
        await asyncio.sleep(1)
    await asyncio.sleep(3)  # late duplicates


async def service_stats(cfg: RunConfig, token: str) -> dict[str, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s, \
                s.get(f"{cfg.api_url}/v1/stats",
                      headers={"Authorization": f"Bearer {token}"}) as resp:
            data: dict[str, Any] = await resp.json()
            counters: dict[str, Any] = data.get("counters", {})
            return counters
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        return {"error": str(e)}


async def histories(cfg: RunConfig, token: str, deliveries: list[Delivery]
                    ) -> dict[str, list[dict[str, Any]]]:
    """The attempt history of each trigger that arrived more than once (newest first; an
    error in place of one that could not be read): what tells a retry after an unanswered
    attempt from a claim that sent twice."""
    twice = [t for t, ds in report.deliveries_by_id(deliveries).items() if len(ds) > 1]
    out: dict[str, list[dict[str, Any]]] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        for t in twice[:report.SAMPLES * 5]:
            try:
                async with s.get(f"{cfg.api_url}/v1/triggers/{t}/attempts",
                                 headers={"Authorization": f"Bearer {token}"}) as resp:
                    body = await resp.json()
                    out[t] = body.get("items", []) if resp.status == 200 else [body]
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                out[t] = [{"error": str(e)}]
    return out


async def run(cfg: RunConfig, stack: Stack, token: str, ring: int) -> dict[str, Any]:
    load_start = os.getloadavg()
    receiver = ReceiverProcess(cfg.receiver_port)
    receiver.spawn()
    watcher = Watcher(stack)
    stop = asyncio.Event()
    watch = asyncio.create_task(watcher.run(stop))
    try:
        await receiver.wait_ready()
        await asyncio.sleep(3)  # the sweepers share out the shards
        t0 = now_ms() + 500
        faults = schedule(KINDS, cfg.first_fault_s, cfg.fault_every_s, cfg.fault_window_s,
                          once=cfg.short)
        injector = Injector(stack, faults, t0, ring)
        registrar = Registrar(cfg, token, cfg.stamp.lower())
        say(f"registering {cfg.triggers} over {cfg.register_s:.0f} s; {len(faults)} faults "
            f"every {cfg.fault_every_s:.0f} s")
        inject = asyncio.create_task(injector.run())
        await registrar.run(t0)
        say(f"registered {sum(1 for r in registrar.results if r.trigger_ids)}; sending "
            "every tenth key again")
        replays = await registrar.replay()
        say(f"{replays} keys sent again; waiting for the faults and the deliveries")
        await inject
        if not await watcher.all_up(90):
            say("warning: the service is not fully back after the last fault")
        await wait_delivered(receiver, registrar, cfg.settle_s)
        stats = await service_stats(cfg, token + "-viewer")  # every counter (ops viewer)
        deliveries = await receiver.deliveries()
        seen_twice = await histories(cfg, token, deliveries)
    finally:
        stop.set()
        await watch
        receiver.stop()
    strays = stack.strays()
    data = report.RunData(t0, registrar.results, deliveries, faults,
                          float(TIER_ENV["TRIGGER_DIRECT_MAX_DELAY_S"]), seen_twice)
    extra = {"when": cfg.stamp, "short": cfg.short, "cassandra_nodes": ring,
             "config": {"triggers": cfg.triggers, "register_s": cfg.register_s,
                        "fire_after_s": [cfg.min_delay_s, cfg.min_delay_s + cfg.spread_s],
                        "fault_every_s": cfg.fault_every_s,
                        "settings": {**TIER_ENV, **(SHORT_ENV if cfg.short else {})}},
             "registration_responses": dict(registrar.responses),
             "keys_sent_again": replays,
             # 2 cores shared with whatever else runs: a loaded machine makes lags longer.
             "load_average_1m": {"start": round(load_start[0], 2),
                                 "end": round(os.getloadavg()[0], 2)},
             "watcher": {"restarts": watcher.restarts, "failed": watcher.failed_restarts},
             "service_counters": stats, "stray_processes": strays}
    report.save_raw(data, VAR / f"triggers-{cfg.stamp}.jsonl")
    return report.build(data, extra)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    token = secrets.token_urlsafe(24)
    stack: Stack | None = None
    try:
        stack, ring = prepare(cfg, token)
        result = asyncio.run(run(cfg, stack, token, ring))
    finally:
        if stack is not None:
            say("stopping the run's processes (infra/app.sh down); making sure every "
                "dependency is up again (infra/up.sh)")
            stack.run("app.sh", "down", check=False)
            logs = stack.keep_logs(list(APPS))
            say(f"logs of every process of the run: {logs.relative_to(ROOT)}/")
            stack.run("up.sh", check=False)
    report.save(result, cfg.out_path)
    print()
    print(report.render(result))
    out = cfg.out_path
    print(f"\nJSON: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    print("The service's processes are stopped: `make up` restores the normal stack.")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
