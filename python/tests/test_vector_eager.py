"""Batches start each instance's step eagerly (runtime.vector._gather_eagerly) over a real socket:
instances that finish without waiting cost no task, those that wait still run concurrently, the
answer keeps the instances' order, the first failing instance (in order) is the one reported
while the others still step, a dropped stream cancels the waiting ones and closes every instance,
and a fast sync environment's batch runs on the loop (runtime.inline)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar

import pytest
from openenv_testenvs import Tracked
from openenv_testkit import WAIT_S, running, wait_released

import openenv
from openenv.runtime.inline import PROBE_CALLS

pytestmark = pytest.mark.anyio

N = 12


class Mixed(Tracked):
    """Async steps: ``{"wait": True}`` waits until every instance told to wait has arrived (so
    they only finish if they run at the same time); ``{"raise": m}`` raises after an optional
    wait; ``{"forever": True}`` waits until cancelled. The observation is the step count."""

    max_sessions = 64
    arrived: ClassVar[int] = 0
    expected: ClassVar[int] = 0
    all_in: ClassVar[asyncio.Event | None] = None
    cancelled: ClassVar[int] = 0

    async def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> int:
        self.n = 0
        return 0

    async def step(self, action: Any) -> int:
        self.n += 1
        cls = type(self)
        if action.get("wait"):
            assert cls.all_in is not None
            cls.arrived += 1
            if cls.arrived == cls.expected:
                cls.all_in.set()
            await asyncio.wait_for(cls.all_in.wait(), WAIT_S)  # only when all wait at once
        if action.get("forever"):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cls.cancelled += 1
                raise
        if action.get("raise"):
            raise ValueError(action["raise"])
        return self.n

    @classmethod
    def expect(cls, n: int) -> None:
        cls.arrived, cls.expected, cls.all_in, cls.cancelled = 0, n, asyncio.Event(), 0


class FastSync(Tracked):
    """A trivial sync step reporting its thread."""

    max_sessions = 64

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> str:
        return threading.current_thread().name

    def step(self, action: Any) -> str:
        return threading.current_thread().name


async def test_waiting_and_immediate_instances_answer_in_order_and_the_waiting_ones_run_concurrently() -> None:
    Mixed.reset_counts()
    async with running(Mixed) as srv, openenv.EnvClient(srv.address, num_envs=N) as c:
        await c.reset_batch()
        waiting = [k for k in range(N) if k % 3 == 0]
        Mixed.expect(len(waiting))
        b = await c.step_batch([{"wait": k in waiting} for k in range(N)])
        assert b.env_ids == list(range(N)) and [r.observation for r in b.results] == [1] * N
        Mixed.expect(N)
        b = await c.step_batch([{"wait": True}] * N, env_ids=list(reversed(range(N))))  # all wait
        assert b.env_ids == list(reversed(range(N))) and [r.observation for r in b.results] == [2] * N
        assert [(await c.state(env_id=k)).step_count for k in range(N)] == [2] * N


async def test_the_first_failing_instance_is_reported_and_the_others_still_step() -> None:
    Mixed.reset_counts()
    async with running(Mixed) as srv, openenv.EnvClient(srv.address, num_envs=N) as c:
        await c.reset_batch()
        Mixed.expect(2)
        actions: list[dict[str, Any]] = [{} for _ in range(N)]
        actions[2] = {"wait": True, "raise": "late"}  # fails after waiting
        actions[5] = {"raise": "at once"}  # fails in its first step
        actions[7] = {"raise": "at once too"}
        actions[9] = {"wait": True}
        with pytest.raises(openenv.Internal, match=r"env 5: ValueError: at once$") as e:
            await c.step_batch(actions)
        assert not e.value.fatal
        # every instance stepped (the waiting ones finish after the answer), as with gather
        for k in range(N):
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while True:
                try:
                    if (await c.state(env_id=k)).step_count == 1 or k in (2, 5, 7):
                        break
                except openenv.EnvError:
                    pass
                assert asyncio.get_running_loop().time() < deadline, f"instance {k} never stepped"
                await asyncio.sleep(0.01)
        assert (await c.step_batch([{}] * N)).results[0].observation == 2  # the session goes on


async def test_a_dropped_stream_cancels_waiting_instances_and_closes_all() -> None:
    Mixed.reset_counts()
    async with running(Mixed) as srv:
        c = openenv.EnvClient(srv.address, num_envs=N)
        await c.connect()
        await c.reset_batch()
        Mixed.expect(N)
        stepping = asyncio.ensure_future(c.step_batch([{"forever": k % 2 == 0} for k in range(N)]))
        await asyncio.sleep(0)
        while srv.manager.active and not any(s.busy for s in srv.manager.sessions.values()):
            await asyncio.sleep(0.01)
        await c.abort()
        stepping.cancel()
        await asyncio.gather(stepping, return_exceptions=True)
        await wait_released(srv, Mixed, closed=N)
        assert Mixed.cancelled == N // 2


async def test_a_fast_sync_environments_batches_move_onto_the_loop() -> None:
    FastSync.reset_counts()
    async with running(FastSync, inline_threshold_s=1e-3) as srv, openenv.EnvClient(srv.address, num_envs=N) as c:
        first = await c.reset_batch()
        assert all(r.observation.startswith("openenv-env") for r in first.results)
        loop_thread = threading.current_thread().name
        for _ in range(3 * PROBE_CALLS):  # batches of N: the hook needs PROBE_CALLS fast calls
            b = await c.step_batch([{}] * N)
            if any(r.observation == loop_thread for r in b.results):
                break
        else:
            pytest.fail("a trivial sync step never ran inline in a batch")
        assert srv.runtime.inline.hooks["step"].inline_calls >= 1  # type: ignore[union-attr]
