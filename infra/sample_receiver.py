"""A sample callback receiver for trying the service: ``make up`` starts it on 127.0.0.1:9000
(``make receiver`` runs it in the foreground). It answers 200 to every POST and logs one line
per callback: the trigger id, the attempt, how late it arrived against its ``fireAt``, the
payload. The development caller (config/callers.dev.toml) may send callbacks here.

It is an example, not a test fixture: the tests and the benchmark run their own receivers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

from aiohttp import web


async def callback(request: web.Request) -> web.Response:
    arrived = datetime.now(UTC)
    raw = await request.read()
    try:
        body = json.loads(raw)
        fire_at = datetime.fromisoformat(body["fireAt"].replace("Z", "+00:00"))
        late = f"{(arrived - fire_at).total_seconds() * 1000:.0f} ms after fireAt"
        payload = json.dumps(body.get("payload"))
    except (ValueError, KeyError, TypeError, AttributeError):
        late, payload = "fireAt unreadable", raw[:200].decode("utf-8", "replace")
    print(f"{arrived:%Y-%m-%dT%H:%M:%S.%f}"[:-3] + "Z "
          f"POST {request.path} trigger={request.headers.get('X-Trigger-Id', '-')} "
          f"attempt={request.headers.get('X-Trigger-Attempt', '-')} {late} payload={payload}",
          flush=True)
    return web.Response(status=200)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/{tail:.*}", callback)
    print(f"sample receiver listening on http://{args.host}:{args.port}/ "
          f"(started {time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
