"""Many sessions on one server: isolation, capacity accounting, and sync environments
that block worker threads without blocking the event loop."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
from openenv_testenvs import AsyncCounter, Counter, Sleeper
from openenv_testkit import WAIT_S, get_info, running, target, wait_released, wait_until

import openenv

pytestmark = pytest.mark.anyio

N_SESSIONS = 100


async def _drive(url: str, k: int, started: asyncio.Event, connected: list[int]) -> tuple[str, list[int], dict]:
    """One session's distinct script: seed k, then deltas derived from k, interleaved
    with the other sessions at every await."""
    rng = random.Random(k)
    deltas = [rng.randint(-50, 50) for _ in range(5 + k % 7)]
    async with openenv.EnvClient(url, options={"tag": f"s{k}"}) as env:
        connected.append(k)
        await asyncio.wait_for(started.wait(), WAIT_S * 3)  # every session is open before anyone steps
        first = await env.reset(seed=k)
        assert first.observation == {"total": k, "tag": f"s{k}"}
        totals = []
        for d in deltas:
            r = await env.step({"delta": d})
            totals.append(r.observation["total"])
            assert r.observation["tag"] == f"s{k}"
            await asyncio.sleep(0)
        st = await env.state()
        return env.session_id, totals, {"history": st.state["history"], "steps": st.step_count, "expected": deltas}


@pytest.mark.parametrize("env_cls", [Counter, AsyncCounter])
async def test_hundred_concurrent_sessions_are_isolated(env_cls: type[Counter]) -> None:
    async with running(env_cls, max_sessions=N_SESSIONS) as srv:
        started = asyncio.Event()
        connected: list[int] = []
        tasks = [asyncio.ensure_future(_drive(srv.address, k, started, connected)) for k in range(N_SESSIONS)]
        try:
            await wait_until(
                lambda: len(connected) == N_SESSIONS or any(t.done() for t in tasks),
                timeout=WAIT_S * 4,
                what="all sessions to open",
            )
            assert srv.manager.active == N_SESSIONS
            with pytest.raises(openenv.ResourceExhausted):  # the 101st is refused while all are open
                await openenv.EnvClient(srv.address).connect()
            started.set()
            results = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S * 6)
        finally:
            started.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        assert len({sid for sid, _, _ in results}) == N_SESSIONS  # one session each
        for k, (_, totals, st) in enumerate(results):
            expected, running_total = [], k
            for d in st["expected"]:
                running_total += d
                expected.append(running_total)
            assert totals == expected, f"session {k} saw another session's effects"
            assert st["history"] == st["expected"] and st["steps"] == len(st["expected"])
        await wait_released(srv, env_cls, closed=N_SESSIONS)
        assert env_cls.created == N_SESSIONS


async def test_blocking_sync_steps_run_in_threads_without_blocking_the_loop() -> None:
    n = 8
    Sleeper.barrier = threading.Barrier(n)  # n steps only get past it if they all run at once
    async with running(Sleeper, max_sessions=n + 1) as srv:
        clients = [openenv.EnvClient(srv.address) for _ in range(n)]
        try:
            for c in clients:
                await c.connect()
                await c.reset()
            steps = [asyncio.ensure_future(c.step({"sleep": True})) for c in clients]
            await wait_until(
                lambda: Sleeper.in_step == n or any(s.done() for s in steps),
                timeout=WAIT_S * 2,
                what=f"{n} steps blocked in worker threads at once",
            )
            assert Sleeper.in_step == n and not Sleeper.barrier.broken
            # every step is blocked in a worker thread, yet the server's loop answers
            assert (await get_info(target(srv))).name == "sleeper"
            async with openenv.EnvClient(srv.address) as other:
                assert (await other.state()).status is openenv.EpisodeStatus.NOT_STARTED
            assert not any(s.done() for s in steps)
            Sleeper.release.set()
            results = await asyncio.wait_for(asyncio.gather(*steps), WAIT_S)
            assert [r.observation for r in results] == ["slept"] * n
            assert [r.step_count for r in results] == [1] * n
        finally:
            Sleeper.release.set()
            for c in clients:
                await c.close()
        await wait_released(srv, Sleeper, closed=n + 1)
