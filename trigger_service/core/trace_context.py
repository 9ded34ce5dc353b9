"""Traces across processes: W3C Trace Context through OpenTelemetry's API.

The registering request's context (its ``traceparent``, or the span the API made for it) is
stored with the trigger (``Trigger.trace_parent``), and every later step of an occurrence,
in whichever process, is a span in a trace that starts there:

- the first occurrence (a one-time trigger's only one): children of the registering span,
  so one trace shows the POST, the promotion, each attempt's claim, send and outcome;
- each later occurrence of a series: its own trace, **linked** to the registering span (a
  series that fires for years in one trace would be unreadable in any trace viewer). The
  trace and parent ids are derived from the occurrence id, so every attempt of one
  occurrence, in any dispatcher, lands in the same trace.

The callback carries the send's context as ``traceparent`` (``inject``). With export off
(the default: ``Tracing(None)``) no span is made, yet the stored context is still made
current around each step, so the callback carries the caller's own ``traceparent`` and log
lines its trace id: propagation never depends on export.

Only the API package is used here (contexts and ids, no I/O); the SDK and its exporter are
chosen in ``platform.tracing``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from trigger_service.core.model import Trigger

TRACEPARENT = "traceparent"
_PROPAGATOR = TraceContextTextMapPropagator()


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current context (None: there is no valid span)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get(TRACEPARENT)


def mark(attributes: Mapping[str, Any]) -> None:
    """Put ``attributes`` on the current span (the registering request's, say); nothing
    when it is not recording."""
    trace.get_current_span().set_attributes(dict(attributes))


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current context's ``traceparent`` (and ``tracestate``) to ``headers``."""
    _PROPAGATOR.inject(headers)


def extract(headers: Mapping[str, str]) -> otel_context.Context:
    """The context a request's headers carry (an empty one without a valid
    ``traceparent``; a malformed one is ignored, as W3C asks)."""
    return _PROPAGATOR.extract(headers, context=otel_context.Context())


def _registered(t: Trigger) -> otel_context.Context:
    return extract({TRACEPARENT: t.trace_parent} if t.trace_parent else {})


def occurrence_parent(t: Trigger) -> tuple[otel_context.Context, tuple[Link, ...]]:
    """The parent context of ``t``'s current occurrence's spans, and their links (see the
    module docstring)."""
    registered = _registered(t)
    if t.occurrence_seq == 0 or t.trace_parent is None:
        return registered, ()
    origin = trace.get_current_span(registered).get_span_context()
    digest = hashlib.blake2b(t.occurrence_id.encode(), digest_size=24).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:], "big") or 1
    own = SpanContext(trace_id, span_id, is_remote=True,
                      trace_flags=TraceFlags(origin.trace_flags))
    parent = trace.set_span_in_context(trace.NonRecordingSpan(own), otel_context.Context())
    return parent, ((Link(origin),) if origin.is_valid else ())


class Tracing:
    """Spans of the steps of an occurrence. ``tracer`` None: export is off, no span is made,
    but the trigger's context is current inside each step (``step``) all the same."""

    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        self._tracer = tracer

    @property
    def recording(self) -> bool:
        return self._tracer is not None

    @contextlib.contextmanager
    def serve(self, name: str, headers: Mapping[str, str],
              attributes: Mapping[str, Any] | None = None) -> Iterator[trace.Span]:
        """The server span of a request that carried ``headers`` (a child of their
        ``traceparent``), current inside the block; with export off, their context is."""
        with self._span(name, extract(headers), SpanKind.SERVER, (),
                        dict(attributes or {})) as span:
            yield span

    @contextlib.contextmanager
    def step(self, name: str, t: Trigger, kind: SpanKind = SpanKind.INTERNAL,
             attributes: Mapping[str, Any] | None = None) -> Iterator[trace.Span]:
        """A span of ``t``'s current occurrence, current inside the block (the trigger's
        stored context is, with export off)."""
        parent, links = occurrence_parent(t)
        with self._span(name, parent, kind, links, _attributes(t, attributes)) as span:
            yield span

    @contextlib.contextmanager
    def _span(self, name: str, parent: otel_context.Context, kind: SpanKind,
              links: tuple[Link, ...], attributes: dict[str, Any]) -> Iterator[trace.Span]:
        """A span under ``parent``, current inside the block; with export off, ``parent``
        itself is current (what the callback and the log lines then carry)."""
        if self._tracer is None:
            token = otel_context.attach(parent)
            try:
                yield trace.get_current_span(parent)
            finally:
                otel_context.detach(token)
            return
        with self._tracer.start_as_current_span(name, context=parent, kind=kind, links=links,
                                                attributes=attributes) as span:
            yield span

    @contextlib.contextmanager
    def child(self, name: str, kind: SpanKind = SpanKind.INTERNAL,
              attributes: Mapping[str, Any] | None = None) -> Iterator[trace.Span]:
        """A span under the current one (inside ``step``); nothing with export off."""
        if self._tracer is None:
            yield trace.get_current_span()
            return
        with self._tracer.start_as_current_span(name, kind=kind,
                                                attributes=dict(attributes or {})) as span:
            yield span

    def record(self, name: str, t: Trigger, start_ns: int, end_ns: int,
               attributes: Mapping[str, Any] | None = None) -> None:
        """A finished span of ``t``'s occurrence, timed by the caller (a step done for many
        triggers at once, e.g. one SQS batch); nothing with export off."""
        if self._tracer is None:
            return
        parent, links = occurrence_parent(t)
        span = self._tracer.start_span(name, context=parent, links=links,
                                       attributes=_attributes(t, attributes),
                                       start_time=start_ns)
        span.end(end_time=end_ns)


def _attributes(t: Trigger, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"trigger.id": t.trigger_id, "trigger.caller": t.caller,
            "trigger.occurrence_id": t.occurrence_id, "trigger.attempt": t.attempts,
            **{k: v for k, v in (extra or {}).items() if v is not None}}
