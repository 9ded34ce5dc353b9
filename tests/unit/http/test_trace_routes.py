"""The API's side of traces (in-memory fakes, OpenTelemetry's in-memory exporter): the
registering request's context is stored with the trigger: the caller's own with export off,
the API's server span (a child of the caller's) with it on; a malformed ``traceparent`` is
ignored. The rest: tests/unit/dispatcher/test_traces.py."""

from __future__ import annotations

from tests.unit.dispatcher.test_traces import (
    CALLER_SPAN,
    CALLER_TRACE,
    TRACEPARENT,
    exported,
    hex_ids,
)
from tests.unit.http.test_routes import AUTH, BODY, Api
from trigger_service.core.trace_context import Tracing
from trigger_service.http.keys import RUNTIME_KEY

__all__ = ["exported"]  # the fixture


async def _registered(api: Api, traceparent: str) -> str:
    status, body, _ = await api.post(BODY, {**AUTH, "traceparent": traceparent})
    assert status == 201, body
    stored = api.env.store.triggers[body["triggerId"]].trace_parent
    assert stored is not None
    return stored


async def test_registration_stores_the_callers_context_or_its_own_span(
        api: Api, exported: tuple[Tracing, object]) -> None:
    assert await _registered(api, TRACEPARENT) == TRACEPARENT  # export off: the caller's
    tracing, exporter = exported
    assert api.client.app is not None
    api.client.app[RUNTIME_KEY].tracing = tracing
    stored = await _registered(api, TRACEPARENT)
    [span] = [s for s in exporter.get_finished_spans()  # type: ignore[attr-defined]
              if s.name == "POST /v1/triggers"]
    trace_id, span_id, parent_id = hex_ids(span)
    assert (trace_id, parent_id) == (CALLER_TRACE, CALLER_SPAN)
    assert span.attributes["http.response.status_code"] == 201
    assert stored == f"00-{CALLER_TRACE}-{span_id}-01"
    assert span.attributes["trigger.id"] in api.env.store.triggers
    # A malformed traceparent is ignored (W3C): a trace of our own starts.
    assert CALLER_TRACE not in await _registered(api, f"00-{CALLER_TRACE}-zz-01")
