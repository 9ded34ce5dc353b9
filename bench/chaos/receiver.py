"""The callback receiver: an aiohttp server on 127.0.0.1 that records every delivery (trigger
id, arrival ms, attempt header, the payload's key) and answers 200 at once.

It runs as its own process (``python -m bench.chaos.receiver --port P``), as bench/receiver.py
does, so that the registering client's CPU can never delay its answers (a late answer is a
callback timeout, hence a retry and a duplicate) nor its timestamps. ``GET /ids`` → the
delivered trigger ids; ``GET /dump`` → every delivery."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from bench.chaos.config import ROOT


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Delivery:
    trigger_id: str
    at_ms: int
    attempt: int
    key: str | None
    body_trigger_id: str | None
    fire_at: str | None


@dataclass
class Recorder:
    deliveries: list[Delivery] = field(default_factory=list)

    async def callback(self, request: web.Request) -> web.Response:
        at = now_ms()
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        payload = body.get("payload")
        key = payload.get("key") if isinstance(payload, dict) else None
        self.deliveries.append(Delivery(
            request.headers.get("X-Trigger-Id", ""), at,
            int(request.headers.get("X-Trigger-Attempt", "0") or 0), key,
            body.get("triggerId"), body.get("fireAt")))
        return web.Response(status=200)

    async def ids(self, request: web.Request) -> web.Response:
        return web.json_response(sorted({d.trigger_id for d in self.deliveries}))

    async def dump(self, request: web.Request) -> web.Response:
        return web.json_response([asdict(d) for d in self.deliveries])


class ReceiverProcess:
    """Starts the receiver process and reads what it recorded."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.chaos.receiver",
                                      "--port", str(self.port)], cwd=ROOT)

    async def wait_ready(self) -> None:
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the receiver exited ({self.proc.returncode}); "
                                   f"is port {self.port} free?")
            try:
                await self.get("/ids")
                return
            except (aiohttp.ClientError, OSError):
                await asyncio.sleep(0.2)
        raise RuntimeError(f"the receiver did not answer on :{self.port}")

    async def get(self, path: str) -> Any:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s, \
                s.get(self.url + path) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def delivered_ids(self) -> set[str]:
        return set(await self.get("/ids"))

    async def deliveries(self) -> list[Delivery]:
        return [Delivery(**d) for d in await self.get("/dump")]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.chaos.receiver")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    rec = Recorder()
    app = web.Application()
    app.router.add_get("/ids", rec.ids)
    app.router.add_get("/dump", rec.dump)
    app.router.add_post("/{tail:.*}", rec.callback)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
