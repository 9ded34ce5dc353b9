"""An OTLP/HTTP trace receiver that counts and drops what it gets: the other end of trace
export when measuring its cost (docs/benchmarks.md), without a collector's own work.

    .venv/bin/python -m bench.otlp_sink [--port 4318]
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 make up

It prints the spans received so far every 10 s (and at exit).
"""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_COUNT = web.AppKey("count", list)


async def traces(request: web.Request) -> web.Response:
    body = ExportTraceServiceRequest()
    body.ParseFromString(await request.read())
    request.app[_COUNT][0] += sum(len(ss.spans) for rs in body.resource_spans
                                  for ss in rs.scope_spans)
    return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                        content_type="application/x-protobuf")


async def serve(port: int) -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_COUNT] = [0]
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        while True:
            await asyncio.sleep(10)
            print(f"spans received: {app[_COUNT][0]}", flush=True)
    finally:
        print(f"spans received: {app[_COUNT][0]}", flush=True)
        await runner.cleanup()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.otlp_sink")
    p.add_argument("--port", type=int, default=4318)
    args = p.parse_args()
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
