"""Traces across the processes on the real Cassandra, SQS and Redis: one reminder's trace, as
an OTLP/HTTP collector receives it from the real exporter, holds every step from the POST to
the callback (the request, the promotion, the claim, the send, the outcome), and the callback
carries the send's ``traceparent``. With export off the callback still carries the caller's.

TRIGGER_DIRECT_MAX_DELAY_S is 6 s here (tests/integration/test_sweeper.py's settings) so that
a trigger 8 s out goes through the sweeper.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.integration.conftest import Stack, serving
from tests.integration.test_sweeper import extra_env
from trigger_service.core.model import Route
from trigger_service.platform.tracing import open_tracing

pytestmark = pytest.mark.integration

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
__all__ = ["extra_env"]  # the sweeper tests' settings: a sweep 1 s apart


@dataclass(frozen=True)
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, object]


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
                    self.spans.append(Received(s.name, s.trace_id.hex(), s.span_id.hex(),
                                               s.parent_span_id.hex(), service, attrs))
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
        stack: Stack, collector: Collector) -> None:
    tracing, provider = open_tracing("test", {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{collector.port}/v1/traces"})
    assert provider is not None
    stack.runtime.tracing = tracing
    await stack.start_dispatcher()
    await stack.start_sweeper()
    status, body, _ = await stack.post(stack.body(delaySeconds=8), traceparent=TRACEPARENT)
    assert status == 201, body
    tid = body["triggerId"]
    row = await stack.runtime.store.get(tid)
    assert row is not None and row.route is Route.SWEEP
    headers = await _one_callback(stack, tid)
    await asyncio.to_thread(provider.force_flush)
    for _ in range(100):  # the export is in a thread: up to 10 s for it to arrive
        if collector.named("trigger.outcome", CALLER_TRACE):
            break
        await asyncio.sleep(0.1)
    await asyncio.to_thread(provider.shutdown)

    [post] = collector.named("POST /v1/triggers", CALLER_TRACE)
    assert post.parent_id == CALLER_SPAN  # the caller's span is the POST's parent
    assert post.attributes["trigger.id"] == tid
    assert row.trace_parent == f"00-{CALLER_TRACE}-{post.span_id}-01"
    [promote] = collector.named("trigger.promote", CALLER_TRACE)
    [deliver] = collector.named("trigger.deliver", CALLER_TRACE)
    assert promote.parent_id == deliver.parent_id == post.span_id
    steps = {name: collector.named(name, CALLER_TRACE)
             for name in ("trigger.claim", "trigger.send", "trigger.outcome")}
    assert {name: [s.parent_id for s in found] for name, found in steps.items()} == {
        name: [deliver.span_id] for name in steps}
    [send] = steps["trigger.send"]
    assert send.attributes["http.response.status_code"] == 200
    assert {s.attributes["trigger.id"] for s in (promote, deliver)} == {tid}
    # The callback carries the send's context: the receiver's spans join the caller's trace.
    assert headers["traceparent"] == f"00-{CALLER_TRACE}-{send.span_id}-01"


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
