"""OpenTelemetry tracing, when the ``otel`` extra is installed (no-ops otherwise).

The server opens one span per request (``openenv.step``, ``openenv.reset``, ...) whose parent
is the trace context the client sent when it opened the session: W3C ``traceparent`` /
``tracestate`` in the gRPC call's metadata, or in the WebSocket upgrade's headers. The
client injects the context current when it connects (:func:`inject`), so the steps of a
session opened inside a trainer's span show up in that trainer's trace.

Spans go to whatever ``TracerProvider`` the process configured (``opentelemetry-sdk`` and an
exporter); with none configured the server skips span bookkeeping altogether.
OpenTelemetry is imported on first use, so ``openenv --help`` never pays for it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

__all__ = ["available", "extract", "finish_span", "inject", "start_span"]

_otel: Any = None  # the API's modules once imported; False when the extra is missing
_tracers: dict[int, Any] = {}  # id(provider) -> its tracer
_PROVIDER_ENV = "OTEL_PYTHON_TRACER_PROVIDER"  # the API loads this provider on first use when set


def _api() -> Any:
    global _otel
    if _otel is None:
        try:
            from opentelemetry import propagate, trace
            from opentelemetry.trace import Status, StatusCode
        except ImportError:  # the otel extra is not installed
            _otel = False
        else:
            _otel = SimpleNamespace(propagate=propagate, trace=trace, Status=Status, StatusCode=StatusCode)
    return _otel


def _tracer() -> Any:
    """The tracer of the configured provider; None when no SDK provider is set (the API's
    default proxy records nothing)."""
    if _otel is None and "opentelemetry.trace" not in sys.modules and not os.environ.get(_PROVIDER_ENV):
        # Nothing imported the API, so nobody set a provider (nor named one to load): no span
        # to record, and an idle server need not import OpenTelemetry (docs/performance.md).
        return None
    api = _api()
    if not api:
        return None
    provider = api.trace.get_tracer_provider()
    if isinstance(provider, (api.trace.ProxyTracerProvider, api.trace.NoOpTracerProvider)):
        return None
    t = _tracers.get(id(provider))
    if t is None:
        _tracers.clear()
        t = _tracers[id(provider)] = provider.get_tracer("openenv")
    return t


def available() -> bool:
    """True when ``opentelemetry-api`` is installed and a tracer provider is configured."""
    return _tracer() is not None


def inject() -> list[tuple[str, str]]:
    """The current trace context as (lower-case) header pairs; empty without a current span."""
    api = _api()
    if not api or not api.trace.get_current_span().get_span_context().is_valid:
        return []
    carrier: dict[str, str] = {}
    api.propagate.inject(carrier)
    return [(k.lower(), v) for k, v in carrier.items()]


def extract(pairs: Iterable[tuple[Any, Any]] | None) -> Any:
    """The trace context carried by metadata or header pairs (str or bytes), or None."""
    if not pairs:
        return None
    carrier: dict[str, str] = {}
    for k, v in pairs:
        key = (k.decode("latin-1") if isinstance(k, bytes) else str(k)).lower()
        if key in ("traceparent", "tracestate", "baggage"):
            carrier[key] = v.decode("latin-1") if isinstance(v, bytes) else str(v)
    api = _api() if carrier else None
    if not api:
        return None
    return api.propagate.extract(carrier)


def start_span(kind: str, parent: Any, attributes: Mapping[str, Any], start_ns: int | None = None) -> Any:
    """A started server span ``openenv.<kind>`` (None without a tracer); end it with :func:`finish_span`."""
    tracer = _tracer()
    if tracer is None:
        return None
    return tracer.start_span(
        f"openenv.{kind}",
        context=parent,
        kind=_otel.trace.SpanKind.SERVER,
        attributes={k: v for k, v in attributes.items() if v is not None and v != ""},
        start_time=start_ns if start_ns is not None else time.time_ns(),
    )


def finish_span(span: Any, code: str, attributes: Mapping[str, Any]) -> None:
    """Set the outcome (``openenv.status``; ERROR unless ``OK``) and end ``span``."""
    if span is None:
        return
    for k, v in attributes.items():
        if v is not None and v != "":
            span.set_attribute(k, v)
    span.set_attribute("openenv.status", code)
    if code != "OK":
        span.set_status(_otel.Status(_otel.StatusCode.ERROR, code))
    span.end()
