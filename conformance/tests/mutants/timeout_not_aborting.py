"""Rule broken: a step answered DEADLINE_EXCEEDED aborts the episode (docs/protocol.md §3.5):
status ABORTED, the next step FAILED_PRECONDITION until a reset. Here a timed-out step is
answered DEADLINE_EXCEEDED but the episode keeps running (the runtime's abort is undone).

Deterministic: a step sent with a timeout runs in a worker thread that waits until the
runtime has answered DEADLINE_EXCEEDED (a gate the patched Session.step opens), so it can
never finish in time, however the threads are scheduled. (It once waited for nothing: on a
loaded machine a trivial step sometimes beat the check's 1 µs timeout, every time out of six,
and the check had no timeout to observe.) Certified at the ``lifecycle`` level only."""

import threading

import openenv.runtime.session as _session
from mutants.base import Counter
from openenv.errors import DeadlineExceeded
from openenv.protocol import EpisodeStatus

CAUGHT_BY = "lifecycle.timeout_aborts"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("lifecycle",)

_GATE_BOUND_S = 60.0  # a gate nobody opens (the step was not timed out after all) stops waiting

_real_step = _session.Session.step


async def _step_keeps_running(self, action, timeout=None):
    status = self.status
    gate = threading.Event() if timeout is not None else None
    self.env.gate = gate
    try:
        return await _real_step(self, action, timeout)
    except DeadlineExceeded:
        if status == EpisodeStatus.RUNNING:
            self.status = EpisodeStatus.RUNNING  # undo the abort: the broken rule
        raise
    finally:
        if gate is not None:
            gate.set()  # answered: the worker thread may finish (as a straggler)


_session.Session.step = _step_keeps_running


class Env(Counter):
    run_in_thread = True  # a step in a worker thread can be outlived by its timeout
    # Never inline (openenv.runtime.inline): the step waits for the runtime's answer, which an
    # inline step would block; the documented opt-out for a hook that waits on the server.
    inline_threshold_s = 0.0
    gate = None

    def step(self, action):
        gate = self.gate
        if gate is not None:
            gate.wait(_GATE_BOUND_S)
        return super().step(action)
