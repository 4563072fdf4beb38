"""Inline execution of fast sync hooks, decided by their measured time.

A sync hook (``def step``, ``reset``, ``state``, a sync tool or rubric...) of an environment
with ``run_in_thread = True`` (the default) runs on a worker thread (:mod:`openenv.runtime.threads`)
so that a slow or blocking call delays only its own session. For a hook that takes a few
microseconds, the hop to the thread and back costs ten times the call itself (docs/performance.md,
the hand-off rows), and with CPython's GIL the thread gives the event loop nothing back while
pure-Python code runs in it. So the runtime times every sync call and runs a hook directly on the
event loop while it is consistently fast:

* **Going inline.** Each hook (per server and environment class, keyed by hook name: ``step``,
  ``reset``, ``tool 'name'``, ``rubric 'name'``, ...) starts on the threads. Each call's time *in
  the thread* (the call itself, not the hop) is measured: it is fast when its CPU time is under
  the threshold and its wall time under :data:`WALL_FACTOR` times the threshold. CPU time,
  because a thread's wall time includes waiting for the GIL while the loop (busy with other
  sessions) holds it, which a call inline would not wait; the wall bound, because a call that
  waits (I/O, a sleep, a lock) uses no CPU but would hold the loop. After :data:`PROBE_CALLS`
  consecutive fast calls, the hook's next calls run inline. One call that is not fast restarts
  the count: a hook that is slow even now and then (more often than once in 16 calls) stays on
  the threads.
* **Reverting.** Every inline call is timed the same way. The first one that is not fast sends the
  hook back to the threads at once (so a hook that became slow stalls the loop once, for one
  call), and doubles the number of fast threaded calls needed before it is tried inline again
  (16, 32, ... up to 16 * 2**10): a hook that is fast most of the time but slow now and then is
  re-probed ever more rarely. After :data:`DECAY_CALLS` consecutive fast inline calls the
  doubling is undone by one step, so a rare hiccup (a GC pause, the process descheduled on a
  loaded machine) is forgotten. CPU time here too, so that the process being descheduled on a
  loaded machine in the middle of a call does not count against the hook; a hook that starts
  waiting (a wall time over :data:`INLINE_WALL_FACTOR` times the threshold, stricter than the
  threaded bound) reverts as well. A call during which the garbage
  collector ran is not measured either way (the pause is the collector's).
* **Deadlines.** A call with a timeout (a step's deadline, a tool's ``timeout_s``) runs inline only
  when the timeout is at least :data:`DEADLINE_FACTOR` times the threshold (50 ms for the default
  50 µs): an inline call cannot be interrupted, so it is chosen only when far below any deadline.
  Should an inline call still overrun its timeout, the request fails with ``DEADLINE_EXCEEDED``
  as a threaded one would (its result is dropped, the episode aborted).
* **What inline means for the hook.** It runs on the event loop's thread, in the request's task,
  with ``asyncio``'s running loop hidden (so ``asyncio.run`` inside the hook works as it does on a
  worker thread). Exceptions are the request's, as from the thread. Calls to one instance never
  overlap either way.

Never inline: ``run_in_thread = False`` environments (always on the loop, as before), ``--isolation
process`` (each call is a pipe round trip to the session's worker: blocking I/O), the factory
(``__init__``), and environments that opt out with ``inline_threshold_s = 0``. Opt out when a
hook may *block* after a run of fast calls, waiting for something another session or the server
itself must do (a barrier between sessions, a condition set from another request, a queue fed by
another session): inline, the wait would hold the loop that the other side needs. Also opt out
when a hook relies on running on a non-main thread. The worker threads are a shared pool, so no
hook could rely on running on *one* particular thread before this either.

The threshold: :attr:`openenv.Environment.inline_threshold_s` (per class), else the server's
(``openenv serve --inline-threshold-us``, ``$OPENENV_INLINE_THRESHOLD_US``), else
:data:`DEFAULT_THRESHOLD_S`; a server threshold of 0 turns inline execution off for every class.
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

__all__ = [
    "DEADLINE_FACTOR",
    "DECAY_CALLS",
    "DEFAULT_THRESHOLD_S",
    "GC_RUNS",
    "INLINE_WALL_FACTOR",
    "MAX_STRIKES",
    "PROBE_CALLS",
    "WALL_FACTOR",
    "HookTimes",
    "InlinePolicy",
    "run_inline",
    "server_threshold_s",
]

DEFAULT_THRESHOLD_S = 50e-6
"""A hook runs inline while its calls take less than this (50 µs: about the thread hand-off's own
cost, so an inline call never holds the loop much longer than handing it off would)."""
PROBE_CALLS = 16
"""Consecutive fast threaded calls before a hook first goes inline."""
MAX_STRIKES = 10
"""Reverts double the probe count up to ``PROBE_CALLS << MAX_STRIKES`` calls."""
DECAY_CALLS = 1024
"""Consecutive fast inline calls that undo one doubling."""
WALL_FACTOR = 100
"""A threaded call counts as fast when its CPU time is under the threshold and its wall time
under ``WALL_FACTOR * threshold`` (5 ms for the default): lenient, because a thread's wall time
includes waiting for the GIL."""
INLINE_WALL_FACTOR = 20
"""An inline call counts as fast when its CPU time is under the threshold and its wall time under
``INLINE_WALL_FACTOR * threshold`` (1 ms for the default): strict, because on the loop's thread
wall time is the call's own, and a hook that waits on I/O (a database, a service) must not
serialise every session's waits on the loop. Such a hook can pass the threaded test and go
inline; its first inline call sends it back (one wait of at most a few ms on the loop, ever
rarer as its strikes double)."""
DEADLINE_FACTOR = 1000
"""A call with a timeout runs inline only when ``timeout >= DEADLINE_FACTOR * threshold``."""
ENV_VAR = "OPENENV_INLINE_THRESHOLD_US"


#: Garbage collections finished in this process (a one-item list: read without a call). A call
#: during which the collector ran is not measured: the pause is the collector's, which would have
#: run wherever the allocation that triggered it happened.
GC_RUNS = [0]


def _count_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop":
        GC_RUNS[0] += 1


if _count_collection not in gc.callbacks:
    gc.callbacks.append(_count_collection)


def server_threshold_s(value_s: float | None = None) -> float:
    """The server-wide threshold: ``value_s`` when given, else ``$OPENENV_INLINE_THRESHOLD_US``
    (microseconds), else :data:`DEFAULT_THRESHOLD_S`."""
    if value_s is None:
        raw = os.environ.get(ENV_VAR, "").strip()
        if not raw:
            return DEFAULT_THRESHOLD_S
        try:
            value_s = float(raw) * 1e-6
        except ValueError:
            raise ValueError(f"${ENV_VAR} must be a number of microseconds, not {raw!r}") from None
    if not value_s >= 0:  # also refuses NaN
        raise ValueError(f"the inline threshold must be >= 0 seconds, not {value_s!r}")
    return value_s


class HookTimes:
    """The measured state of one hook: where its next call runs, and why."""

    __slots__ = ("fast", "inline", "inline_calls", "needed", "reverts", "streak", "strikes", "thread_calls")

    def __init__(self) -> None:
        self.inline = False
        self.fast = 0  # consecutive fast threaded calls
        self.needed = PROBE_CALLS  # fast threaded calls needed before going inline
        self.strikes = 0  # reverts not yet forgiven (needed = PROBE_CALLS << strikes)
        self.streak = 0  # consecutive fast inline calls
        self.inline_calls = 0  # counters, for tests and metrics
        self.thread_calls = 0
        self.reverts = 0

    def __repr__(self) -> str:
        return (
            f"HookTimes(inline={self.inline}, fast={self.fast}/{self.needed}, strikes={self.strikes}, "
            f"inline_calls={self.inline_calls}, thread_calls={self.thread_calls}, reverts={self.reverts})"
        )


class InlinePolicy:
    """Per-hook measurements of one environment class on one server; used on the event loop only."""

    def __init__(self, threshold_s: float) -> None:
        if not threshold_s > 0:
            raise ValueError("an inline policy needs a threshold > 0 (0 means: never inline, no policy)")
        self.threshold_s = threshold_s
        self.min_timeout_s = threshold_s * DEADLINE_FACTOR
        self.max_wall_s = threshold_s * WALL_FACTOR
        self.max_inline_wall_s = threshold_s * INLINE_WALL_FACTOR
        self.hooks: dict[str, HookTimes] = {}

    def hook(self, name: str) -> HookTimes:
        h = self.hooks.get(name)
        if h is None:
            h = self.hooks[name] = HookTimes()
        return h

    def threaded(self, h: HookTimes, seconds: float | None, cpu_seconds: float = 0.0, collected: bool = False) -> None:
        """Record a threaded call's wall and CPU time (None: unknown, e.g. it outlived its timeout;
        ``collected``: the garbage collector ran meanwhile, so the times say nothing)."""
        h.thread_calls += 1
        if collected:
            return
        if seconds is not None and cpu_seconds < self.threshold_s and seconds < self.max_wall_s:
            h.fast += 1
            if h.fast >= h.needed:
                h.inline, h.streak = True, 0
        else:
            h.fast = 0

    def ran_inline(self, h: HookTimes, seconds: float, cpu_seconds: float, collected: bool = False) -> None:
        """Record an inline call's wall and CPU time: when it was not fast, the hook goes back to
        the threads (unless the garbage collector ran meanwhile: then the times say nothing)."""
        h.inline_calls += 1
        if collected:
            return
        if cpu_seconds < self.threshold_s and seconds < self.max_inline_wall_s:
            h.streak += 1
            if h.streak >= DECAY_CALLS and h.strikes:
                h.strikes -= 1
                h.needed, h.streak = PROBE_CALLS << h.strikes, 0
            return
        h.inline, h.fast, h.streak = False, 0, 0
        h.reverts += 1
        h.strikes = min(h.strikes + 1, MAX_STRIKES)
        h.needed = PROBE_CALLS << h.strikes


def run_inline(fn: Any, *args: Any) -> Any:
    """Call ``fn(*args)`` on this (the loop's) thread with the running loop hidden, as on a worker
    thread: ``asyncio.run`` and ``asyncio.get_running_loop`` inside behave as they would there."""
    loop = asyncio._get_running_loop()
    asyncio._set_running_loop(None)
    try:
        return fn(*args)
    finally:
        asyncio._set_running_loop(loop)
