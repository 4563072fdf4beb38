"""Prometheus metrics of one server: what ``/metrics`` shows (docs/observability.md).

Every server (a :class:`openenv.Host`, an ``openenv bridge``) owns one :class:`Metrics`
with its own ``CollectorRegistry``, so two servers in one process never share counters.
Needs ``prometheus-client`` (the ``http`` extra); without it :func:`new_metrics` returns
None and nothing is counted.

Names and labels (stable; dashboards may rely on them):

=============================================  =========  ==================================
name                                           type       labels
=============================================  =========  ==================================
``openenv_sessions_open``                      gauge      transport
``openenv_sessions_max``                       gauge      (none)
``openenv_sessions_opened_total``              counter    transport
``openenv_handshakes_total``                   counter    transport, outcome (``OK`` or the
                                                          error code name)
``openenv_requests_total``                     counter    transport, kind, code
``openenv_request_duration_seconds``           histogram  transport, kind
``openenv_env_call_duration_seconds``          histogram  transport, kind (time in the
                                                          environment's code, rubric included)
``openenv_protocol_overhead_seconds``          histogram  transport, kind (request minus env)
``openenv_episodes_total``                     counter    transport, outcome (terminated,
                                                          truncated)
``openenv_episode_return``                     summary    transport (sum of an episode's rewards)
``openenv_episode_length_steps``               histogram  transport
``openenv_received_bytes_total``               counter    transport
``openenv_sent_bytes_total``                   counter    transport
``openenv_http_requests_total``                counter    path, method, status
=============================================  =========  ==================================

Plus prometheus-client's process, platform and garbage-collector collectors, as every Python
exporter shows them: ``process_resident_memory_bytes``, ``process_virtual_memory_bytes``,
``process_cpu_seconds_total``, ``process_open_fds``, ``process_max_fds``,
``process_start_time_seconds`` (Linux: read from ``/proc``), ``python_info`` and
``python_gc_*``. They describe the whole process, so two servers in one process show the same
values.

``transport`` is ``grpc``, ``websocket`` or ``mcp``; ``kind`` is the request kind of the
protocol (``handshake``, ``reset``, ``step``, ``state``, ``list_tools``, ``call_tool``,
``close``, ``batch_reset``, ``batch_step``, ...); ``code`` is ``OK`` or an error code name
of the table (docs/protocol.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "Metrics", "merge_expositions", "new_metrics", "process_gauge"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Seconds: 100 µs (an in-process gridworld step) to a minute (an LLM-judged rubric)."""

_LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)


class Metrics:
    """The collectors of one server, in their own registry. Thread-safe (prometheus-client)."""

    def __init__(self) -> None:
        import prometheus_client as pc

        self._pc = pc
        r = self.registry = pc.CollectorRegistry(auto_describe=True)
        self.sessions_open = pc.Gauge("openenv_sessions_open", "Sessions open now.", ["transport"], registry=r)
        self.sessions_max = pc.Gauge("openenv_sessions_max", "Capacity: most sessions open at once.", registry=r)
        self.sessions_opened = pc.Counter(
            "openenv_sessions_opened", "Sessions opened since start.", ["transport"], registry=r
        )
        self.handshakes = pc.Counter(
            "openenv_handshakes", "Session opening attempts by outcome.", ["transport", "outcome"], registry=r
        )
        self.requests = pc.Counter(
            "openenv_requests", "Requests by kind and status code.", ["transport", "kind", "code"], registry=r
        )
        self.duration = pc.Histogram(
            "openenv_request_duration_seconds",
            "Time from a request's arrival to its reply.",
            ["transport", "kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.env_time = pc.Histogram(
            "openenv_env_call_duration_seconds",
            "Time spent in the environment's code (and its rubric) per request.",
            ["transport", "kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = pc.Histogram(
            "openenv_protocol_overhead_seconds",
            "Request time not spent in the environment: decoding, encoding, scheduling.",
            ["transport", "kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.episodes = pc.Counter(
            "openenv_episodes", "Episodes that ended, by how.", ["transport", "outcome"], registry=r
        )
        self.episode_return = pc.Summary(
            "openenv_episode_return", "Sum of the rewards of an episode, at its end.", ["transport"], registry=r
        )
        self.episode_length = pc.Histogram(
            "openenv_episode_length_steps",
            "Steps of an episode, at its end.",
            ["transport"],
            buckets=_LENGTH_BUCKETS,
            registry=r,
        )
        self.received = pc.Counter(
            "openenv_received_bytes", "Bytes of requests received (message payloads).", ["transport"], registry=r
        )
        self.sent = pc.Counter(
            "openenv_sent_bytes", "Bytes of replies sent (message payloads).", ["transport"], registry=r
        )
        self.http_requests = pc.Counter(
            "openenv_http_requests",
            "Plain HTTP requests by route and status.",
            ["path", "method", "status"],
            registry=r,
        )
        # The process as a whole (memory, CPU, file descriptors), the interpreter and its GC.
        r.register(_ProcessGauges())
        pc.ProcessCollector(registry=r)
        pc.PlatformCollector(registry=r)
        pc.GCCollector(registry=r)
        self._children: dict[tuple[Any, ...], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached: the hot path skips prometheus-client's lookup."""
        key = (id(metric), *labels)
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = metric.labels(*labels)
        return c

    def render(self) -> bytes:
        """The exposition text of every collector (Prometheus text format 0.0.4)."""
        data: bytes = self._pc.generate_latest(self.registry)
        return data

    def serve(self, port: int, host: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` on its own port (a thread of prometheus-client); returns the
        server, whose ``shutdown()`` stops it."""
        server, _thread = self._pc.start_http_server(port, host, registry=self.registry)
        return server


_PROCESS_GAUGES: dict[str, tuple[str, str, Callable[[], float]]] = {}


def process_gauge(name: str, documentation: str, read: Callable[[], float], kind: str = "gauge") -> None:
    """Report ``read()`` as ``name`` on every :class:`Metrics` of this process (a bound the
    process keeps as a whole, e.g. the bytes of unfinished messages its listeners hold;
    ``kind``: ``gauge`` or ``counter``). Registering a name again replaces it."""
    _PROCESS_GAUGES[name] = (documentation, kind, read)


class _ProcessGauges:
    """The values :func:`process_gauge` registered, read at each scrape."""

    def collect(self) -> list[Any]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        out: list[Any] = []
        for name, (doc, kind, read) in list(_PROCESS_GAUGES.items()):
            family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            out.append(family(name, doc, value=float(read())))
        return out


def new_metrics() -> Metrics | None:
    """A :class:`Metrics`, or None when ``prometheus-client`` is not installed."""
    try:
        return Metrics()
    except ImportError:
        return None


# Samples that do not add up across worker processes: the earliest, the largest, or one of them.
_EARLIEST = ("_created", "process_start_time_seconds")
_LARGEST = ("process_max_fds",)
_ANY = ("python_info", "openenv_sessions_max_per_worker")


def merge_expositions(texts: list[bytes | None], hangs: list[int] | None = None) -> bytes:
    """The metrics of a server of several workers (docs/observability.md, Workers) from each
    worker's exposition (None: that worker did not answer), in worker order: every sample
    summed over the workers that answered (counters, histogram buckets and gauges such as
    ``openenv_sessions_open`` or ``process_resident_memory_bytes``; exact, as each worker
    counts its own), except creation and start times (the earliest), ``process_max_fds`` (the
    largest) and ``python_info`` (one); plus, per worker (label ``worker``):
    ``openenv_worker_up``, ``openenv_worker_sessions_open`` and
    ``openenv_worker_resident_memory_bytes``; and with ``hangs`` (the supervisor's count, per
    worker, of the times it found the worker's loop hung and replaced it),
    ``openenv_worker_hangs_total``."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Metric] = {}
    samples: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    up = Metric("openenv_worker_up", "1 when the worker answered, 0 when it is down (restarting).", "gauge")
    sessions = Metric("openenv_worker_sessions_open", "Sessions open in the worker now.", "gauge")
    rss = Metric("openenv_worker_resident_memory_bytes", "Resident memory of the worker process.", "gauge")
    hung = Metric(
        "openenv_worker_hangs", "Times the worker's event loop stopped answering and it was replaced.", "counter"
    )
    for index, count in enumerate(hangs or ()):
        hung.add_sample("openenv_worker_hangs_total", {"worker": str(index)}, float(count))
    for index, text in enumerate(texts):
        label = {"worker": str(index)}
        up.add_sample("openenv_worker_up", label, 0.0 if text is None else 1.0)
        if text is None:
            continue
        open_now = 0.0
        for fam in text_string_to_metric_families(text.decode()):
            if fam.name not in families:
                families[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                samples[fam.name] = {}
            acc = samples[fam.name]
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                if s.name == "openenv_sessions_open":
                    open_now += s.value
                if s.name == "process_resident_memory_bytes":
                    rss.add_sample(s.name.replace("process_", "openenv_worker_"), label, s.value)
                if key not in acc:
                    acc[key] = s.value
                elif s.name.endswith(_EARLIEST):
                    acc[key] = min(acc[key], s.value)
                elif s.name in _LARGEST:
                    acc[key] = max(acc[key], s.value)
                elif s.name not in _ANY:
                    acc[key] += s.value
        sessions.add_sample("openenv_worker_sessions_open", label, open_now)
    for name, fam in families.items():
        for (sample, labels), value in samples[name].items():
            fam.add_sample(sample, dict(labels), value)

    class _Merged:
        def collect(self) -> list[Metric]:
            return [*families.values(), up, sessions, rss, *([hung] if hangs is not None else [])]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged())
    data: bytes = generate_latest(registry)
    return data
