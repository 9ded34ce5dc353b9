"""A callback receiver that verifies and deduplicates, on aiohttp (the service's own stack).

    RECEIVER_SIGNING_SECRETS=whsec_new,whsec_old  REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python clients/python/examples/receiver_aiohttp.py --port 9100

Each callback: verify the Standard Webhooks signature over the exact body with any of the
caller's secrets (401 and not processed otherwise, also for an old signed request replayed);
claim its occurrence id (Redis SET NX with a TTL when REDIS_URL is set, shared by every
process of the receiver; else an in-memory LRU); a duplicate is answered 200 without
processing it again; a failure releases the claim and answers 500, so the service retries.
"""

from __future__ import annotations

import argparse
import os
import sys

from aiohttp import web

from trigger_client import InvalidSignature
from trigger_client.receiver import AsyncDeduplicator, Callback, verify

SECRETS = web.AppKey("secrets", list[str])
DEDUP = web.AppKey("dedup", AsyncDeduplicator)


async def process(callback: Callback) -> None:
    """The receiver's own work (here: one line per occurrence)."""
    print(f"{callback.occurrence_id} attempt={callback.attempt} payload={callback.payload}",
          flush=True)


async def hook(request: web.Request) -> web.Response:
    raw = await request.read()  # the exact bytes: verify before parsing
    try:
        callback = verify(request.app[SECRETS], request.headers, raw)
    except InvalidSignature as e:
        print(f"refused: {e}", file=sys.stderr, flush=True)
        return web.json_response({"error": "invalid_signature"}, status=401)
    dedup = request.app[DEDUP]
    if not await dedup.claim(callback.occurrence_id):
        print(f"{callback.occurrence_id} duplicate (attempt {callback.attempt}): skipped",
              flush=True)
        return web.Response(status=200)
    try:
        await process(callback)
    except Exception:
        await dedup.release(callback.occurrence_id)  # let the service's retry process it
        raise
    return web.Response(status=200)


async def gone(request: web.Request) -> web.Response:
    print(f"410 gone: {request.headers.get('X-Trigger-Occurrence-Id')}", flush=True)
    return web.Response(status=410)


def make_app(secrets: list[str], dedup: AsyncDeduplicator,
             answer_gone: bool = False) -> web.Application:
    app = web.Application()
    app[SECRETS] = secrets
    app[DEDUP] = dedup
    app.router.add_post("/{tail:.*}", gone if answer_gone else hook)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--gone", action="store_true", help="answer 410 to every callback")
    args = parser.parse_args()
    secrets = [s for s in os.environ.get("RECEIVER_SIGNING_SECRETS", "").split(",") if s]
    if not secrets:
        sys.exit("set RECEIVER_SIGNING_SECRETS (triggerctl secrets rotate prints a new one)")
    if os.environ.get("REDIS_URL"):
        import redis.asyncio as aioredis
        dedup = AsyncDeduplicator.redis(aioredis.Redis.from_url(os.environ["REDIS_URL"]))
    else:
        dedup = AsyncDeduplicator.in_memory()
    app = make_app(secrets, dedup, args.gone)
    print(f"verifying receiver on http://{args.host}:{args.port}/", file=sys.stderr, flush=True)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
