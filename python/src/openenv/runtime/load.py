"""A server's live load (RFC 0005): what ``GetLoad`` and ``GET /load`` report.

:class:`LoadMeter` is fed by the sessions (one :meth:`~LoadMeter.record_step` per step) and
read by :func:`server_load`, which adds the slot counts of the server's sessions (a
:class:`~openenv.runtime.SessionManager`, read through :class:`LoadSource` so that this module,
below the session module, never imports it). Reading it never calls the environment, so a
fleet client may poll it often.
"""

from __future__ import annotations

import collections
import time
from typing import Protocol

from openenv.v1 import load_pb2

__all__ = ["RECENT_STEPS", "LoadMeter", "LoadSource", "server_load", "sum_loads"]

RECENT_STEPS = 256  # the window of step_latency_p50/p99: recent enough to follow a change of load


class LoadMeter:
    """Step latencies of the last :data:`RECENT_STEPS` steps and the server's counters."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.steps_total = 0
        # Pipelined messages (RFC 0009) received and the requests they carried: how much a
        # server's clients coalesce (a ratio near 1 means they pipeline little).
        self.pipelined_messages = 0
        self.pipelined_requests = 0
        self._recent: collections.deque[float] = collections.deque(maxlen=RECENT_STEPS)

    def record_step(self, seconds: float) -> None:
        """One step (or batch step) took ``seconds``, as the server saw it."""
        self.steps_total += 1
        self._recent.append(seconds)

    def latency_quantiles(self) -> tuple[float, float]:
        """(p50, p99) of the recent steps in seconds; (0, 0) before any step."""
        if not self._recent:
            return 0.0, 0.0
        ordered = sorted(self._recent)
        last = len(ordered) - 1
        return ordered[round(0.5 * last)], ordered[round(0.99 * last)]


class _Capacity(Protocol):
    @property
    def max_sessions(self) -> int: ...


class LoadSource(Protocol):
    """What :func:`server_load` reads of a server's sessions (a ``SessionManager`` has it all)."""

    @property
    def load(self) -> LoadMeter: ...
    @property
    def runtime(self) -> _Capacity: ...
    @property
    def active(self) -> int: ...
    @property
    def handshakes_in_progress(self) -> int: ...
    @property
    def opened_total(self) -> int: ...
    @property
    def draining(self) -> bool: ...


def server_load(manager: LoadSource) -> load_pb2.ServerLoad:
    """The live load of the server that owns ``manager``."""
    meter = manager.load
    p50, p99 = meter.latency_quantiles()
    out = load_pb2.ServerLoad(
        sessions_open=manager.active,
        max_sessions=manager.runtime.max_sessions,
        queued_handshakes=manager.handshakes_in_progress,
        steps_total=meter.steps_total,
        sessions_opened_total=manager.opened_total,
        draining=manager.draining,
    )
    out.step_latency_p50.FromNanoseconds(int(p50 * 1e9))
    out.step_latency_p99.FromNanoseconds(int(p99 * 1e9))
    out.uptime.FromNanoseconds(int((time.monotonic() - meter.started) * 1e9))
    return out


def sum_loads(loads: list[load_pb2.ServerLoad]) -> load_pb2.ServerLoad:
    """The load of a server of several workers (RFC 0013) from theirs: capacities, sessions,
    queues and counters added; the latency quantiles and the uptime of the slowest and the
    oldest worker (quantiles of separate windows do not add); draining when any worker is."""
    out = load_pb2.ServerLoad()
    p50 = p99 = up = 0
    for w in loads:
        out.sessions_open += w.sessions_open
        out.max_sessions += w.max_sessions
        out.queued_handshakes += w.queued_handshakes
        out.steps_total += w.steps_total
        out.sessions_opened_total += w.sessions_opened_total
        out.draining = out.draining or w.draining
        p50 = max(p50, w.step_latency_p50.ToNanoseconds())
        p99 = max(p99, w.step_latency_p99.ToNanoseconds())
        up = max(up, w.uptime.ToNanoseconds())
    out.step_latency_p50.FromNanoseconds(p50)
    out.step_latency_p99.FromNanoseconds(p99)
    out.uptime.FromNanoseconds(up)
    return out
