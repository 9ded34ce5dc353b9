"""Traces across the processes on the real Cassandra, SQS and Redis: one reminder's trace, as
an OTLP/HTTP collector receives it from the real exporter, holds every step from the POST to
the callback (the request, the promotion, the claim, the send, the outcome), and the callback
carries the send's ``traceparent``. With export off the callback still carries the caller's.

TRIGGER_DIRECT_MAX_DELAY_S is 6 s here (tests/integration/test_sweeper.py's settings) so that
a trigger 8 s out goes through the sweeper.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from playwright.async_api import Browser

from tests.integration.conftest import Stack, serving
from tests.integration.test_docs_page import chromium_browser
from tests.integration.test_ops_page import DESKTOP, SHOTS
from tests.integration.test_sweeper import extra_env
from trigger_service.core.model import Route
from trigger_service.platform.tracing import open_tracing

pytestmark = pytest.mark.integration

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
# Fixtures: the sweeper tests' settings (a sweep 1 s apart), the pages' browser.
__all__ = ["chromium_browser", "extra_env"]


@dataclass(frozen=True)
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, object]
    start_ns: int
    end_ns: int


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver (protobuf), as a collector would run it."""

    port: int = 0
    spans: list[Received] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert request.path == "/v1/traces"
        assert request.headers["Content-Type"] == "application/x-protobuf"
        body = ExportTraceServiceRequest()
        body.ParseFromString(await request.read())
        for rs in body.resource_spans:
            service = next(a.value.string_value for a in rs.resource.attributes
                           if a.key == "service.name")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {a.key: (a.value.string_value or a.value.int_value
                                     or a.value.bool_value) for a in s.attributes}
                    self.spans.append(Received(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                        service, attrs, s.start_time_unix_nano, s.end_time_unix_nano))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def named(self, name: str, trace_id: str) -> list[Received]:
        return [s for s in self.spans if s.name == name and s.trace_id == trace_id]


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    async with serving(Collector()) as c:
        yield c


async def _one_callback(stack: Stack, trigger_id: str) -> dict[str, str]:
    rec = stack.receiver
    assert await rec.wait_for(lambda: bool(rec.for_trigger(trigger_id)), 40)
    await stack.wait_status(trigger_id, "FIRED", 10)
    return rec.for_trigger(trigger_id)[0].headers


async def test_one_reminders_trace_holds_every_step_from_the_post_to_the_callback(
        stack: Stack, collector: Collector, chromium_browser: Browser) -> None:
    # Each component exports as its process would, under its own name, over OTLP/HTTP.
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{collector.port}/v1/traces"}
    opened = {name: open_tracing(name, env) for name in ("dispatcher", "sweeper", "api")}
    stack.runtime.tracing = opened["dispatcher"][0]
    await stack.start_dispatcher()
    stack.runtime.tracing = opened["sweeper"][0]
    await stack.start_sweeper()
    stack.runtime.tracing = opened["api"][0]  # the API's middleware reads it per request
    status, body, _ = await stack.post(stack.body(delaySeconds=8), traceparent=TRACEPARENT)
    assert status == 201, body
    tid = body["triggerId"]
    row = await stack.runtime.store.get(tid)
    assert row is not None and row.route is Route.SWEEP
    headers = await _one_callback(stack, tid)
    providers = [provider for _, provider in opened.values() if provider is not None]
    assert len(providers) == 3
    for provider in providers:
        await asyncio.to_thread(provider.force_flush)
    for _ in range(100):  # the export is in a thread: up to 10 s for it to arrive
        if collector.named("trigger.outcome", CALLER_TRACE):
            break
        await asyncio.sleep(0.1)
    for provider in providers:
        await asyncio.to_thread(provider.shutdown)

    [post] = collector.named("POST /v1/triggers", CALLER_TRACE)
    assert post.parent_id == CALLER_SPAN  # the caller's span is the POST's parent
    assert post.attributes["trigger.id"] == tid
    assert row.trace_parent == f"00-{CALLER_TRACE}-{post.span_id}-01"
    [promote] = collector.named("trigger.promote", CALLER_TRACE)
    [deliver] = collector.named("trigger.deliver", CALLER_TRACE)
    assert promote.parent_id == deliver.parent_id == post.span_id
    assert [s.service for s in (post, promote, deliver)] == [
        "trigger-api", "trigger-sweeper", "trigger-dispatcher"]
    steps = {name: collector.named(name, CALLER_TRACE)
             for name in ("trigger.claim", "trigger.send", "trigger.outcome")}
    assert {name: [s.parent_id for s in found] for name, found in steps.items()} == {
        name: [deliver.span_id] for name in steps}
    [send] = steps["trigger.send"]
    assert send.attributes["http.response.status_code"] == 200
    assert {s.attributes["trigger.id"] for s in (promote, deliver)} == {tid}
    # The callback carries the send's context: the receiver's spans join the caller's trace.
    assert headers["traceparent"] == f"00-{CALLER_TRACE}-{send.span_id}-01"
    # What a person sees in a trace viewer: the waterfall, one row a span.
    trace = sorted((s for s in collector.spans if s.trace_id == CALLER_TRACE),
                   key=lambda s: s.start_ns)
    page = await chromium_browser.new_page(
        viewport={"width": DESKTOP["width"], "height": DESKTOP["height"]})
    await page.set_content(waterfall(trace))
    assert await page.locator(".row").count() == len(trace) == 6
    await page.screenshot(path=str(SHOTS / "trace-one-reminder.png"))
    await page.close()


async def test_with_export_off_the_callback_carries_the_callers_traceparent(
        stack: Stack) -> None:
    # The default: no exporter, no span made, and yet propagation.
    await stack.start_dispatcher()
    status, body, _ = await stack.post(stack.body(delaySeconds=1), traceparent=TRACEPARENT)
    assert status == 201, body
    headers = await _one_callback(stack, body["triggerId"])
    assert headers["traceparent"] == TRACEPARENT
    # Without one, none is made up.
    status, body, _ = await stack.post(stack.body(delaySeconds=1))
    headers = await _one_callback(stack, body["triggerId"])
    assert "traceparent" not in {k.lower() for k in headers}


def waterfall(spans: list[Received]) -> str:
    """A trace viewer's waterfall of ``spans`` (sorted by start) as a page: a row a span,
    indented by depth, its bar placed on the trace's time line (at least 2 px wide)."""
    t0, t1 = spans[0].start_ns, max(s.end_ns for s in spans)
    depth: dict[str, int] = {}
    rows = []
    for s in spans:
        depth[s.span_id] = depth.get(s.parent_id, -1) + 1
        left = 100 * (s.start_ns - t0) / (t1 - t0)
        width = 100 * (s.end_ns - s.start_ns) / (t1 - t0)
        rows.append(
            f'<div class="row"><div class="name" style="padding-left:{depth[s.span_id]}em">'
            f'{html.escape(s.service)} &middot; {html.escape(s.name)}</div>'
            f'<div class="lane"><div class="bar" style="left:{left:.3f}%;width:{width:.3f}%">'
            f'</div></div><div class="ms">{(s.end_ns - s.start_ns) / 1e6:,.1f} ms</div></div>')
    return (f"<html><body style='font:14px sans-serif;margin:24px'>"
            f"<h2>trace {spans[0].trace_id} &middot; {(t1 - t0) / 1e9:.2f} s</h2>"
            "<style>.row{display:flex;height:30px;align-items:center;border-bottom:1px solid #eee}"
            ".name{width:360px}.lane{position:relative;flex:1;height:100%}"
            ".bar{position:absolute;top:8px;height:14px;min-width:2px;background:#3f51b5}"
            ".ms{width:110px;text-align:right;color:#555}</style>"
            + "".join(rows) + "</body></html>")
