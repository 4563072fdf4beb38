"""What the transports report, and where it goes: metrics, access logs, trace spans.

A transport makes one :class:`SessionObserver` per session stream (a gRPC ``Session`` call,
a ``/ws`` connection, an MCP session) and tells it when the session opens (or is refused),
when each request starts and ends, and when the session closes. The observer turns that
into the metrics of :mod:`openenv.observability.metrics`, the ``openenv.access`` log
records of :mod:`openenv.observability.logs` and the spans of
:mod:`openenv.observability.tracing`, so the three always agree.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from openenv.observability import tracing
from openenv.observability.logs import ACCESS_LOGGER
from openenv.observability.metrics import Metrics, new_metrics

__all__ = ["Observer", "Pending", "SessionObserver"]

access = logging.getLogger(ACCESS_LOGGER)
_INFO = logging.INFO


class Observer:
    """The observability of one server: its :class:`Metrics` (None without
    ``prometheus-client``), and the access log and spans (always; they are no-ops when
    nobody listens)."""

    def __init__(self, metrics: Metrics | bool | None = True, max_sessions: int | None = None) -> None:
        self.metrics: Metrics | None = new_metrics() if metrics is True else (metrics or None)
        if self.metrics is not None and max_sessions is not None:
            self.metrics.sessions_max.set(max_sessions)
        #: With several worker processes (RFC 0013): every worker's metrics, merged
        #: (:meth:`openenv.workers.WorkerPeers.metrics`), in place of this process's own.
        self.merged: Callable[[], Awaitable[bytes]] | None = None

    async def render(self) -> bytes:
        """What ``/metrics`` answers: this server's metrics (merged over its workers when it
        runs several); empty without prometheus-client."""
        if self.merged is not None:
            return await self.merged()
        return self.metrics.render() if self.metrics is not None else b""

    def session(self, transport: str, *, trace_headers: Any = None, client_name: str = "") -> SessionObserver:
        """A :class:`SessionObserver` for one session stream of ``transport``."""
        return SessionObserver(self, transport, tracing.extract(trace_headers), client_name)

    def http_request(self, path: str, method: str, status: int) -> None:
        m = self.metrics
        if m is not None:
            m.child(m.http_requests, path, method, str(status)).inc()


class Pending:
    """A request in progress (see :meth:`SessionObserver.begin`)."""

    __slots__ = ("env0", "kind", "request_id", "span", "t0")

    def __init__(self, kind: str, request_id: Any, t0: float, env0: float | None, span: Any) -> None:
        self.kind, self.request_id, self.t0, self.env0, self.span = kind, request_id, t0, env0, span


class SessionObserver:
    """One session stream: counts its requests, its episodes and its bytes."""

    def __init__(self, observer: Observer, transport: str, parent: Any, client_name: str) -> None:
        self.observer = observer
        self.metrics = observer.metrics
        self.transport = transport
        self.parent = parent  # the client's trace context (None: a new trace per request)
        self.client_name = client_name
        self.session_id = ""
        self.episode_id = ""
        self.env_seconds: Callable[[], float | None] = _none
        self.opened = False
        self._returns: dict[Any, float] = {}  # env key -> return so far of its running episode

    # -- session lifecycle

    def open(self, session_id: str, env_seconds: Callable[[], float | None] | None = None) -> None:
        """The session was created (handshake accepted)."""
        self.session_id = session_id
        self.opened = True
        if env_seconds is not None:
            self.env_seconds = env_seconds
        m = self.metrics
        if m is not None:
            t = self.transport
            m.child(m.handshakes, t, "OK").inc()
            m.child(m.sessions_opened, t).inc()
            m.child(m.sessions_open, t).inc()
        if access.isEnabledFor(_INFO):
            access.info(
                "%s session %s opened (client %r)",
                self.transport,
                session_id,
                self.client_name,
                extra={
                    "event": "session_open",
                    "transport": self.transport,
                    "session_id": session_id,
                    "client_name": self.client_name,
                },
            )

    def refuse(self, code: str, message: str = "") -> None:
        """Opening the session failed with error ``code``."""
        m = self.metrics
        if m is not None:
            m.child(m.handshakes, self.transport, code).inc()
        if access.isEnabledFor(_INFO):
            access.info(
                "%s session refused: %s %s",
                self.transport,
                code,
                message,
                extra={"event": "session_refused", "transport": self.transport, "status": code},
            )

    def close(self) -> None:
        """The session stream ended (whatever the reason). Idempotent."""
        if not self.opened:
            return
        self.opened = False
        m = self.metrics
        if m is not None:
            m.child(m.sessions_open, self.transport).dec()
        if access.isEnabledFor(_INFO):
            access.info(
                "%s session %s closed",
                self.transport,
                self.session_id,
                extra={"event": "session_close", "transport": self.transport, "session_id": self.session_id},
            )

    # -- requests

    def begin(self, kind: str, request_id: Any = None, nbytes: int = 0) -> Pending:
        """A request of ``kind`` arrived (``nbytes``: its size on the wire)."""
        m = self.metrics
        if m is not None and nbytes:
            m.child(m.received, self.transport).inc(nbytes)
        span = None
        if tracing.available():
            span = tracing.start_span(
                kind,
                self.parent,
                {
                    "openenv.transport": self.transport,
                    "openenv.session_id": self.session_id,
                    "openenv.request_id": None if request_id is None else str(request_id),
                    "openenv.kind": kind,
                },
            )
        return Pending(kind, request_id, time.perf_counter(), self.env_seconds(), span)

    def end(self, p: Pending, code: str = "OK", nbytes: int = 0, episode_id: str = "") -> None:
        """The reply to ``p`` was sent: ``code`` is ``OK`` or an error code name."""
        duration = time.perf_counter() - p.t0
        env_s: float | None = None
        if p.env0 is not None:
            now = self.env_seconds()
            if now is not None:
                env_s = max(0.0, min(now - p.env0, duration))
        if episode_id:
            self.episode_id = episode_id
        t, kind = self.transport, p.kind
        m = self.metrics
        if m is not None:
            m.child(m.requests, t, kind, code).inc()
            m.child(m.duration, t, kind).observe(duration)
            if env_s is not None:
                m.child(m.env_time, t, kind).observe(env_s)
                m.child(m.overhead, t, kind).observe(duration - env_s)
            if nbytes:
                m.child(m.sent, t).inc(nbytes)
        if p.span is not None:
            tracing.finish_span(
                p.span,
                code,
                {"openenv.session_id": self.session_id, "openenv.episode_id": self.episode_id, "openenv.env_s": env_s},
            )
        if access.isEnabledFor(_INFO):
            access.info(
                "%s %s session=%s episode=%s request=%s status=%s duration_ms=%.3f%s",
                t,
                kind,
                self.session_id or "-",
                self.episode_id or "-",
                "-" if p.request_id is None else p.request_id,
                code,
                duration * 1e3,
                "" if env_s is None else f" env_ms={env_s * 1e3:.3f}",
                extra={
                    "event": "request",
                    "transport": t,
                    "session_id": self.session_id,
                    "episode_id": self.episode_id,
                    "request_id": p.request_id,
                    "kind": kind,
                    "status": code,
                    "duration_ms": round(duration * 1e3, 3),
                    "env_ms": None if env_s is None else round(env_s * 1e3, 3),
                },
            )

    def time_step(self, key: Any, reward: float | None, step_count: int, terminated: bool, truncated: bool) -> None:
        """A time step of environment ``key`` (0 outside vectorised sessions): a step
        count of 0 starts an episode; the step that ends it records its return and length."""
        if step_count == 0:
            self._returns[key] = 0.0
            return
        ret = self._returns.get(key, 0.0) + (reward or 0.0)
        if not (terminated or truncated):
            self._returns[key] = ret
            return
        self._returns.pop(key, None)
        m = self.metrics
        if m is not None:
            t = self.transport
            m.child(m.episodes, t, "terminated" if terminated else "truncated").inc()
            m.child(m.episode_return, t).observe(ret)
            m.child(m.episode_length, t).observe(step_count)


def _none() -> float | None:
    return None
