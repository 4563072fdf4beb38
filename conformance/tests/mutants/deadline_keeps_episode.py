"""Rule broken: a step answered DEADLINE_EXCEEDED aborts its episode (docs/protocol.md §3.5):
state reports ABORTED and the next step is FAILED_PRECONDITION until a reset. Here the server's
timeout path answers DEADLINE_EXCEEDED and leaves the episode RUNNING, so the next step runs
in an episode whose state nobody knows.

Only one action is slow enough to time out: ``{"delta": 3}`` awaits a 20 ms remote call (an
``asyncio.sleep``: it leaves the event loop free, as it should); every other action, the
declared examples included, answers at once and cannot be timed out, even with a 1 us timeout
(an async step that does not await finishes before the loop looks at the deadline). A check
that tries only the examples sees no timeout at all; one that searches the actions finds it.

Deterministic: whether a step times out depends only on its action and timeout (the step's
20 ms timer is always later than a 1 us deadline's), never on scheduling. Certified at the
``lifecycle`` level only."""

import asyncio

import openenv.runtime.session as _session
from mutants.base import Counter
from openenv.errors import DeadlineExceeded

CAUGHT_BY = "lifecycle.timeout_aborts"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("lifecycle",)

REMOTE_CALL_S = 0.020


def setup() -> None:
    """Make the runtime's timeout path forget the abort (in the server process only)."""
    real = _session.Session._step

    async def step_forgetting_the_abort(self, action, timeout):
        was = self.status
        try:
            return await real(self, action, timeout)
        except DeadlineExceeded:
            self.status = was  # the defect: the episode goes on as if nothing happened
            raise

    _session.Session._step = step_forgetting_the_abort


class Env(Counter):
    async def step(self, action):
        if action.get("delta") == 3:
            await asyncio.sleep(REMOTE_CALL_S)  # the one slow action: a remote call, awaited
        return Counter.step(self, action)


#: What the check's reason must say: the rule broken, on the one action that times out.
CAUGHT_SAYING = ("DEADLINE_EXCEEDED", "ABORTED", '{"delta":3}')
