"""Rule broken: the server stays live while a step runs (docs/protocol.md §3.5): a step
timeout fires on time and other sessions are answered meanwhile. The environment's
``async def step`` makes a synchronous, blocking call (6 s) on the event loop, caught by the
check's absolute bound (2 s here: ``RUN_OPTIONS``); ``blocking_client_in_async_step`` is the
short block that only the measured probe sees.

Deterministic and cheap: only steps sent with a timeout of at least 0.1 s block (the
liveness check's; no other check sends one), so the rest of the run is not slowed down; the
block always outlasts the check's bound (2 s), whatever the scheduling. Certified at the
``concurrency`` level only."""

import time

import openenv.runtime.session as _session
from mutants.base import Counter

CAUGHT_BY = "concurrency.event_loop_live"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("concurrency",)
RUN_OPTIONS = {"liveness_bound": 2.0}

BLOCK_S = 6.0
_real_step = _session.Session.step


async def _blocking_step(self, action, timeout=None):
    if timeout is not None and timeout >= 0.1:
        time.sleep(BLOCK_S)  # the synchronous call inside an async step: the loop stalls
    return await _real_step(self, action, timeout)


_session.Session.step = _blocking_step


class Env(Counter):
    async def step(self, action):
        return Counter.step(self, action)
