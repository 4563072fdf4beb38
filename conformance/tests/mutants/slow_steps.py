"""Not a mutant: the healthy counter whose step takes 30 ms the way a correct environment may
take it, each of the three ways a step is allowed to be slow (``STEP_KIND``, per module):
waiting on the worker threads (``sleep``), computing on them (``cpu``: pure Python, holding the
GIL), or awaiting on the event loop (``await``). ``concurrency.event_loop_live`` must pass on
each: the controls of ``blocking_client_in_async_step``, which makes the same 30 ms wait on
the event loop. Used by their own tests only (a few checks), not by the full controls' runs."""

import asyncio
import time

from mutants.base import Counter

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
STEP_S = 0.030


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class SleepingStep(Counter):
    run_in_thread = True

    def step(self, action):
        time.sleep(STEP_S)  # a blocking call on a worker thread: the loop stays free
        return super().step(action)


class ComputingStep(Counter):
    run_in_thread = True

    def step(self, action):
        _spin(STEP_S)  # CPU-bound Python on a worker thread: the loop gets the GIL every switch interval
        return super().step(action)


class AwaitingStep(Counter):
    async def step(self, action):
        await asyncio.sleep(STEP_S)  # the remote call awaited: the loop serves others meanwhile
        return Counter.step(self, action)


Env = SleepingStep
