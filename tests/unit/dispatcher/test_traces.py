"""Traces on the in-memory fakes with OpenTelemetry's in-memory exporter: an occurrence's
claim, send and outcome are spans of the registering trace (a series' later occurrences:
their own trace, linked to it); the channel sees the send's context; log lines name the
trace; with export off the caller's own context goes through untouched; the sweeper's
promotion is a span per trigger. The API's side: tests/unit/http/test_trace_routes.py; the
real stack with an OTLP/HTTP collector: tests/integration/test_traces.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sweeper.promotion import Due, Promoter
from tests.unit.dispatcher.fakes import Env
from trigger_service.core.errors import ConfigError
from trigger_service.core.model import Route, Status, Trigger
from trigger_service.core.trace_context import Tracing, current_traceparent, occurrence_parent
from trigger_service.platform.logs import add_trace_ids
from trigger_service.platform.tracing import exporter_kind, open_tracing

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
def exported() -> Iterator[tuple[Tracing, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Tracing(provider.get_tracer("test")), exporter
    provider.shutdown()


def hex_ids(span: ReadableSpan) -> tuple[str, str, str]:
    """(trace id, span id, parent span id) of ``span``, as W3C hex ("" for a root)."""
    ctx, parent = span.get_span_context(), span.parent
    assert ctx is not None
    return (format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"),
            format(parent.span_id, "016x") if parent is not None else "")


def _traceparent_in(ctx: otel_context.Context) -> str | None:
    token = otel_context.attach(ctx)
    try:
        return current_traceparent()
    finally:
        otel_context.detach(token)


def test_export_is_off_unless_the_otel_variables_ask_for_it() -> None:
    assert exporter_kind({}) is None
    assert exporter_kind({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == "otlp"
    assert exporter_kind({"OTEL_TRACES_EXPORTER": "console"}) == "console"
    assert exporter_kind({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}) is None
    assert exporter_kind({"OTEL_TRACES_EXPORTER": "none",
                          "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) is None
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER"):
        exporter_kind({"OTEL_TRACES_EXPORTER": "zipkin"})
    tracing, provider = open_tracing("api", {})
    assert not tracing.recording and provider is None


def test_a_series_later_occurrence_is_its_own_trace_linked_to_the_registration() -> None:
    t = Trigger("trg_1", "c", "https://x/cb", "null", 1, 0, 0, Route.DIRECT,
                trace_parent=TRACEPARENT)
    first, links = occurrence_parent(t)
    assert links == () and _traceparent_in(first) == TRACEPARENT
    second, links = occurrence_parent(replace(t, occurrence_seq=1))
    again, _ = occurrence_parent(replace(t, occurrence_seq=1, attempts=3))
    third, _ = occurrence_parent(replace(t, occurrence_seq=2))
    assert [format(link.context.trace_id, "032x") for link in links] == [CALLER_TRACE]
    ids = [_traceparent_in(c) or "" for c in (second, again, third)]
    assert ids[0] == ids[1] != ids[2]  # every attempt of one occurrence: one trace
    assert CALLER_TRACE not in ids[0] + ids[2]
    # No stored context (and export off): none is made up.
    none, links = occurrence_parent(replace(t, trace_parent=None, occurrence_seq=1))
    assert links == () and _traceparent_in(none) is None


async def test_an_occurrences_claim_send_and_outcome_are_spans_of_the_registration_trace(
        env: Env, exported: tuple[Tracing, InMemorySpanExporter]) -> None:
    tracing, exporter = exported
    seen: list[str | None] = []
    env.channel.on_deliver = lambda _t: seen.append(current_traceparent())
    t = await env.add(0, trace_parent=TRACEPARENT)
    await env.dispatcher_with(tracing=tracing).handle(await env.receive_one(t))
    assert env.row(t).status is Status.FIRED
    spans = {s.name: hex_ids(s) for s in exporter.get_finished_spans()}
    assert set(spans) == {"trigger.deliver", "trigger.claim", "trigger.send",
                          "trigger.outcome"}
    deliver = spans["trigger.deliver"]
    assert deliver[0] == CALLER_TRACE and deliver[2] == CALLER_SPAN
    assert {name: (s[0], s[2]) for name, s in spans.items() if name != "trigger.deliver"} == {
        name: (CALLER_TRACE, deliver[1])
        for name in ("trigger.claim", "trigger.send", "trigger.outcome")}
    # The channel ran inside the send's span: that is the traceparent the callback carries.
    assert seen == [f"00-{CALLER_TRACE}-{spans['trigger.send'][1]}-01"]


async def test_with_export_off_the_channel_sees_the_callers_context_and_logs_its_trace(
        env: Env) -> None:
    seen: list[str | None] = []
    lines: list[dict[str, object]] = []

    def look(_t: Trigger) -> None:
        seen.append(current_traceparent())
        lines.append(dict(add_trace_ids(None, "info", {"event": "x"})))

    env.channel.on_deliver = look
    t = await env.add(0, trace_parent=TRACEPARENT)
    plain = await env.add(0)
    await env.dispatcher().handle(await env.receive_one(t))
    await env.dispatcher().handle(await env.receive_one(plain))
    assert seen == [TRACEPARENT, None]
    assert lines[0] == {"event": "x", "trace_id": CALLER_TRACE, "span_id": CALLER_SPAN}
    assert lines[1] == {"event": "x"}  # no trace: no ids on the line


async def test_promotion_records_a_span_per_trigger_sent(
        env: Env, exported: tuple[Tracing, InMemorySpanExporter]) -> None:
    tracing, exporter = exported
    a = await env.add(60_000, trace_parent=TRACEPARENT)
    b = await env.add(60_000)
    outcome = await Promoter(env.store, env.queue, env.clock, 1, tracing).promote(
        [Due(a.trigger_id, a.fire_at_ms), Due(b.trigger_id, b.fire_at_ms)])
    assert outcome.sent == 2
    spans = [s for s in exporter.get_finished_spans() if s.name == "trigger.promote"]
    by_trigger = {str(s.attributes["trigger.id"]): hex_ids(s) for s in spans if s.attributes}
    assert set(by_trigger) == {a.trigger_id, b.trigger_id}
    assert by_trigger[a.trigger_id][0::2] == (CALLER_TRACE, CALLER_SPAN)
    assert by_trigger[b.trigger_id][2] == ""  # no registering context: a root
