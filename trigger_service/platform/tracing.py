"""Trace export, configured by OpenTelemetry's standard ``OTEL_*`` variables; off by default.

Export is on when ``OTEL_TRACES_EXPORTER`` is ``otlp`` (or ``console``, one JSON span per
line on stderr, for a look by hand), or when it is unset and an OTLP endpoint is
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``).
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` keeps it off whatever else is
set. The OTLP/HTTP exporter reads the rest itself (endpoint, headers, timeout,
compression), the SDK the sampler (``OTEL_TRACES_SAMPLER``, default parent-based always-on)
and the batch processor's queue; ``OTEL_SERVICE_NAME`` overrides the process's own name
(``trigger-api``, ``trigger-dispatcher``, ...).

With export off no provider is made and no span: ``core.trace_context`` still carries
the callers' ``traceparent`` to their callbacks and log lines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)

from trigger_service.core.errors import ConfigError
from trigger_service.core.trace_context import Tracing

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def exporter_kind(env: Mapping[str, str]) -> str | None:
    """``"otlp"``, ``"console"`` or None (off), from ``env``; raises ``ConfigError`` for
    an exporter this service does not ship."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    kind = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not kind:
        return "otlp" if any(env.get(k) for k in _ENDPOINTS) else None
    if kind == "none":
        return None
    if kind not in ("otlp", "console"):
        raise ConfigError(f"OTEL_TRACES_EXPORTER={kind!r}: otlp, console or none")
    return kind


def open_tracing(process: str, env: Mapping[str, str] | None = None,
                 exporter: SpanExporter | None = None) -> tuple[Tracing, TracerProvider | None]:
    """The ``Tracing`` of a process named ``process`` and its provider (None with export off;
    the caller shuts it down at exit, which flushes what is queued). ``exporter``: instead
    of the one ``env`` names (tests pass an in-memory one)."""
    env = os.environ if env is None else env
    kind = "given" if exporter is not None else exporter_kind(env)
    if kind is None:
        return Tracing(None), None
    if exporter is None:
        exporter = (OTLPSpanExporter(endpoint=_endpoint(env)) if kind == "otlp"
                    else ConsoleSpanExporter())
    provider = TracerProvider(resource=Resource.create({"service.name": f"trigger-{process}"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider.get_tracer("trigger_service")), provider


def _endpoint(env: Mapping[str, str]) -> str | None:
    """The traces URL ``env`` names, as the exporter would read it from the process's own
    environment (None: the exporter's default, http://localhost:4318/v1/traces)."""
    if env.get(_ENDPOINTS[0]):
        return env[_ENDPOINTS[0]]
    base = env.get(_ENDPOINTS[1])
    return base.rstrip("/") + "/v1/traces" if base else None
