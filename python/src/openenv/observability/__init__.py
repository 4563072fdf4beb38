"""Observability for operators: Prometheus metrics, structured logs, OpenTelemetry traces.

* :class:`Observer` / :class:`SessionObserver`: what the transports (the gRPC interceptor of
  :mod:`openenv.observability.grpc`, the HTTP side's middleware) report per session and per
  request; one place feeds the metrics, the access log and the spans;
* :class:`Metrics`: the ``/metrics`` collectors (``prometheus-client``, the ``http`` extra);
* :func:`configure_logging`: text or JSON log lines (``--log-format``);
* :mod:`openenv.observability.tracing`: spans and W3C trace-context propagation (the
  ``otel`` extra).

docs/observability.md lists the metric names and log fields.
"""

from openenv.observability.logs import ACCESS_LOGGER, JsonFormatter, configure_logging
from openenv.observability.metrics import CONTENT_TYPE, Metrics, new_metrics
from openenv.observability.observer import Observer, SessionObserver

__all__ = [
    "ACCESS_LOGGER",
    "CONTENT_TYPE",
    "JsonFormatter",
    "Metrics",
    "Observer",
    "SessionObserver",
    "configure_logging",
    "new_metrics",
]
