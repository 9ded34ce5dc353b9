"""A callback receiver for the benchmark: records when each callback arrives.

Runs as its own process so the benchmark's registration load cannot delay the timestamps.
``GET /stats`` → ``{"arrivals": N, "max_open": M}``; ``GET /dump`` → every arrival as
``[trigger_id, attempt, arrival_ms, occurrence_id]``; ``POST /reset`` forgets everything.
``POST /slow/<ms>/...`` answers ``ms`` milliseconds after recording the arrival (a slow
receiver: ``make bench``'s ``fairness`` herd and ``flow``); ``max_open`` is the most such
requests open at once since the reset. ``POST /fail-once/...`` answers 500 to a trigger's
first attempt and 200 to the others (``make bench``'s ``retry``).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiohttp import web

arrivals: list[tuple[str, int, int, str]] = []
slow_open = {"now": 0, "max": 0}


async def callback(request: web.Request) -> web.Response:
    at_ms = time.time_ns() // 1_000_000  # first thing: the arrival time
    arrivals.append((request.headers.get("X-Trigger-Id", ""),
                     int(request.headers.get("X-Trigger-Attempt", "0")), at_ms,
                     request.headers.get("X-Trigger-Occurrence-Id", "")))
    await request.read()
    return web.Response(status=200)


async def slow_callback(request: web.Request) -> web.Response:
    slow_open["now"] += 1
    slow_open["max"] = max(slow_open["max"], slow_open["now"])
    try:
        answer = await callback(request)
        await asyncio.sleep(int(request.match_info["ms"]) / 1000)
        return answer
    finally:
        slow_open["now"] -= 1


async def fail_once(request: web.Request) -> web.Response:
    answer = await callback(request)
    if request.headers.get("X-Trigger-Attempt") == "1":
        return web.Response(status=500)
    return answer


async def stats(request: web.Request) -> web.Response:
    return web.json_response({"arrivals": len(arrivals), "max_open": slow_open["max"]})


async def dump(request: web.Request) -> web.Response:
    return web.json_response(arrivals)


async def reset(request: web.Request) -> web.Response:
    arrivals.clear()
    slow_open["max"] = slow_open["now"]
    return web.json_response({"ok": True})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=9100)
    args = p.parse_args()
    app = web.Application()
    app.router.add_get("/stats", stats)
    app.router.add_get("/dump", dump)
    app.router.add_post("/reset", reset)
    app.router.add_post("/cb/{tail:.*}", callback)
    app.router.add_post("/slow/{ms:[0-9]+}/{tail:.*}", slow_callback)
    app.router.add_post("/fail-once/{tail:.*}", fail_once)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
