"""``--isolation process`` (RFC 0003): each session's environment runs in its own worker
process, so ``os._exit`` or a segfault in native code loses only that session: its client is
told (UNAVAILABLE, fatal), the other sessions carry on, the slot comes back and the server
serves on."""

from __future__ import annotations

import os

import pytest
from openenv_testenvs import Fragile, RatedRace
from openenv_testkit import running, wait_until

import openenv
from openenv.rubrics import CREDITS_METADATA_KEY

pytestmark = pytest.mark.anyio

SPAWN_S = 60.0
"""Bound on anything that starts a worker (a spawned interpreter importing openenv: seconds on
a loaded machine)."""


async def test_a_crashing_environment_loses_only_its_own_session() -> None:
    async with running(Fragile, isolation="process") as srv:
        url = srv.address
        async with openenv.EnvClient(url, timeout=SPAWN_S, connect_timeout=SPAWN_S) as survivor:
            first = await survivor.reset()
            assert first.observation["pid"] != os.getpid()  # not in the server's process
            assert await survivor.call_tool("where", {}) is not None
            for crash in ("exit", "segv"):
                victim = openenv.EnvClient(url, timeout=SPAWN_S, connect_timeout=SPAWN_S)
                await victim.connect()
                await victim.reset()
                with pytest.raises(openenv.Unavailable) as e:
                    await victim.step(crash)
                assert e.value.fatal and "worker process died" in e.value.message
                await victim.close()
                await wait_until(lambda: srv.manager.active == 1, SPAWN_S, "the crashed session's slot")
                r = await survivor.step("ok")  # the other session never noticed
                assert r.observation["pid"] == first.observation["pid"]
            assert (await survivor.step("ok")).observation["n"] == 3
        async with openenv.EnvClient(url, timeout=SPAWN_S, connect_timeout=SPAWN_S) as fresh:  # the server serves on
            await fresh.reset()
            assert (await fresh.step("ok")).observation["n"] == 1
        await wait_until(lambda: srv.manager.active == 0, SPAWN_S, "every slot to come back")


async def test_a_rubric_scores_in_the_environments_worker_with_its_episode_state() -> None:
    """With ``--isolation process`` the rubric runs in the worker beside the instance it reads
    (``self.env``): rewards, breakdowns, trajectory credits, and snapshots/forks carrying the
    rubric's episode state are those of thread mode."""
    async with running(RatedRace, isolation="process") as srv:
        async with openenv.EnvClient(srv.address, timeout=SPAWN_S, connect_timeout=SPAWN_S) as env:
            worker = (await env.reset()).observation["pid"]
            assert worker != os.getpid()
            r = await env.step("run")
            assert r.reward == 1.0  # same_process 1 + episode 0 (running)
            assert r.reward_breakdown["same_process"].reason == f"scored in {worker}"
            snap = await env.snapshot()  # one step in the rubric's trajectory
            r = await env.step("win")
            assert r.terminated and r.reward == 2.0
            assert r.metadata[CREDITS_METADATA_KEY] == {"reward.episode": [0.5, 1.0]}
            [fork] = await env.fork(1, snapshot=snap)  # a new worker, the rubric's state restored
            try:
                r = await fork.step("lose")
                assert r.observation["pid"] not in (worker, os.getpid())
                assert r.reward == 0.0 and r.metadata[CREDITS_METADATA_KEY] == {"reward.episode": [-0.5, -1.0]}
            finally:
                await fork.close()
            await env.reset()  # the trajectory is cleared on reset, in the worker
            r = await env.step("win")
            assert r.metadata[CREDITS_METADATA_KEY] == {"reward.episode": [1.0]}
