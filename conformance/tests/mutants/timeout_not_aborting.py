"""Rule broken: a step answered DEADLINE_EXCEEDED aborts the episode (docs/protocol.md §3.5):
status ABORTED, the next step FAILED_PRECONDITION until a reset. Here a timed-out step is
answered DEADLINE_EXCEEDED but the episode keeps running (the runtime's abort is undone).

Deterministic: the step runs in a worker thread and the conformance check gives it 1 µs, so
every timed step times out, whatever the scheduling."""

import openenv.runtime.session as _session
from mutants.base import Counter
from openenv.errors import DeadlineExceeded
from openenv.protocol import EpisodeStatus

CAUGHT_BY = "lifecycle.timeout_aborts"
COLLATERAL: frozenset[str] = frozenset()

_real_step = _session.Session.step


async def _step_keeps_running(self, action, timeout=None):
    status = self.status
    try:
        return await _real_step(self, action, timeout)
    except DeadlineExceeded:
        if status == EpisodeStatus.RUNNING:
            self.status = EpisodeStatus.RUNNING  # undo the abort: the broken rule
        raise


_session.Session.step = _step_keeps_running


class Env(Counter):
    run_in_thread = True  # a step in a worker thread can be outlived by its timeout
