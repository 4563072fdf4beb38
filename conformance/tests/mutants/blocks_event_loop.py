"""Rule broken: the server stays live while a step runs (docs/protocol.md §3.5): a step
timeout fires on time and other sessions are answered meanwhile. The environment's
``async def step`` makes a synchronous, blocking call (25 s) on the event loop.

Deterministic and cheap: only steps sent with a timeout of at least 0.1 s block (the
liveness check's; no other check sends one), so the rest of the run is not slowed down; the
block always outlasts the check's bound (10 s), whatever the scheduling."""

import time

import openenv.runtime.session as _session
from mutants.base import Counter

CAUGHT_BY = "concurrency.event_loop_live"
COLLATERAL: frozenset[str] = frozenset()

BLOCK_S = 25.0
_real_step = _session.Session.step


async def _blocking_step(self, action, timeout=None):
    if timeout is not None and timeout >= 0.1:
        time.sleep(BLOCK_S)  # the synchronous call inside an async step: the loop stalls
    return await _real_step(self, action, timeout)


_session.Session.step = _blocking_step


class Env(Counter):
    async def step(self, action):
        return Counter.step(self, action)
