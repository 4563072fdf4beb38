"""The environments' worker threads (openenv.runtime.threads): results and exceptions reach the
caller's future, threads start on demand within their bound, a cancelled call's result is
dropped, shutdown cancels what has not started, and a sync environment's steps run off the
event loop through them."""

from __future__ import annotations

import asyncio
import threading

import pytest
from openenv_testenvs import Counter
from openenv_testkit import WAIT_S, running

import openenv
from openenv.runtime.inline import PROBE_CALLS
from openenv.runtime.threads import EnvThreads

pytestmark = pytest.mark.anyio


async def test_calls_return_results_and_raise_exceptions_off_the_loop() -> None:
    pool = EnvThreads(4)
    try:
        main = threading.get_ident()
        assert await asyncio.wait_for(pool.submit(lambda: 41 + 1), WAIT_S) == 42
        assert await asyncio.wait_for(pool.submit(threading.get_ident), WAIT_S) != main

        def boom() -> None:
            raise KeyError("nope")

        with pytest.raises(KeyError, match="nope"):
            await asyncio.wait_for(pool.submit(boom), WAIT_S)
        results = await asyncio.wait_for(asyncio.gather(*(pool.submit(lambda i=i: i * i) for i in range(50))), WAIT_S)
        assert results == [i * i for i in range(50)]
    finally:
        pool.shutdown()


async def test_threads_start_on_demand_within_the_bound() -> None:
    pool = EnvThreads(2)
    gate = threading.Event()
    try:
        for _ in range(5):  # sequential calls reuse the idle thread
            await asyncio.wait_for(pool.submit(lambda: None), WAIT_S)
        assert pool.threads == 1
        blocked = [pool.submit(gate.wait) for _ in range(4)]  # 4 calls, 2 threads: 2 wait in the queue
        assert pool.threads == 2
        gate.set()
        assert await asyncio.wait_for(asyncio.gather(*blocked), WAIT_S) == [True] * 4
    finally:
        gate.set()
        pool.shutdown()


async def test_a_cancelled_call_drops_its_result_and_shutdown_cancels_calls_not_started() -> None:
    pool = EnvThreads(1)
    gate = threading.Event()
    running_call = pool.submit(gate.wait)
    queued = pool.submit(lambda: "never")
    running_call.cancel()  # the thread still runs it; its result is dropped, not set on a cancelled future
    pool.shutdown()
    gate.set()
    await asyncio.wait_for(asyncio.wait({queued}), WAIT_S)
    assert queued.cancelled() and running_call.cancelled()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: None)


async def test_a_sync_environment_steps_in_worker_threads_and_stays_in_order() -> None:
    seen: list[int] = []

    class Where(Counter):
        def step(self, action: object) -> openenv.StepResult:
            seen.append(threading.get_ident())
            return super().step(action)  # type: ignore[arg-type]

    async with running(Where) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=0)
        results = await asyncio.gather(*(env.step({"delta": 1}) for _ in range(30)))
        assert [r.observation["total"] for r in results] == list(range(1, 31))
        # The first calls of a hook always run on the threads; a hook measured consistently fast
        # may then move onto the loop (openenv.runtime.inline, test_inline.py), still in order.
        assert threading.get_ident() not in seen[:PROBE_CALLS]
        assert srv.manager.threads.threads >= 1
