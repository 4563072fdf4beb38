"""The episode state machine (docs/protocol.md §3.4-3.6): reset arguments, episode ids,
step counting, server-side truncation and auto-reset."""

from __future__ import annotations

import pytest
from openenv_testenvs import AutoResetCounter, Counter, LimitedCounter, Scripted
from openenv_testkit import RawSession, ok, running, target

import openenv
from openenv.v1 import environment_pb2
from openenv.values import from_value

pytestmark = pytest.mark.anyio
Status = openenv.EpisodeStatus


async def test_reset_arguments_reach_the_environment() -> None:
    async with running(Scripted) as srv:
        async with openenv.EnvClient(srv.address) as env:
            r = await env.reset(seed=7, episode_id="my-episode", options={"level": [1, "hard"]})
            assert r.observation == {"seed": 7, "episode_id": "my-episode", "options": {"level": [1, "hard"]}}
            assert r.episode_id == "my-episode" and r.step_count == 0
            r = await env.reset(seed=0)  # seed 0 is a seed, not "unset"
            assert r.observation["seed"] == 0
            r = await env.reset()
            assert r.observation["seed"] is None
            assert len(r.episode_id) == 32 and int(r.episode_id, 16) >= 0  # a fresh uuid4 hex
            assert r.observation["episode_id"] == r.episode_id
        async with RawSession(target(srv)) as s:  # the largest uint64 seed survives the trip
            await s.open()
            ts = ok(await s.request(reset=environment_pb2.ResetRequest(seed=2**64 - 1)), "reset").time_step
            assert from_value(ts.observation.json)["seed"] == float(2**64 - 1)  # JSON numbers are doubles


async def test_episode_ids_are_fresh_and_step_counts_restart() -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address) as env:
            seen = set()
            for _ in range(3):
                r = await env.reset()
                assert r.episode_id not in seen
                seen.add(r.episode_id)
                for k in range(1, 4):
                    step = await env.step({"delta": 1})
                    assert (step.step_count, step.episode_id) == (k, r.episode_id)
                st = await env.state()
                assert (st.episode_id, st.step_count, st.status) == (r.episode_id, 3, Status.RUNNING)


async def test_server_truncates_at_max_episode_steps() -> None:
    async with running(LimitedCounter) as srv:
        async with openenv.EnvClient(srv.address) as env:
            assert env.info is not None and env.info.capabilities.max_episode_steps == 3
            await env.reset()
            flags = [(r.terminated, r.truncated) for r in [await env.step({"delta": 1}) for _ in range(3)]]
            assert flags == [(False, False), (False, False), (False, True)]
            assert (await env.state()).status is Status.TRUNCATED
            with pytest.raises(openenv.FailedPrecondition):
                await env.step({"delta": 1})
            await env.reset()
            await env.step({"delta": 1})
            await env.step({"delta": 1})
            last = await env.step({"delta": 1, "finish": "terminated"})  # terminated wins at the limit
            assert last.terminated and not last.truncated
            assert (await env.state()).status is Status.TERMINATED


async def test_auto_reset_starts_a_new_episode_instead_of_failing() -> None:
    async with running(AutoResetCounter) as srv:
        async with openenv.EnvClient(srv.address) as env:
            assert env.info is not None and env.info.capabilities.auto_reset
            first = await env.step({"delta": 5})  # before any reset: the step resets
            assert first.step_count == 0 and first.episode_id and first.observation["total"] == 0
            assert (await env.state()).status is Status.RUNNING
            r = await env.step({"delta": 5, "finish": "terminated"})
            assert r.terminated and r.step_count == 1
            again = await env.step({"delta": 9})  # after the end: a new episode, the action is not applied
            assert again.step_count == 0 and again.episode_id != first.episode_id
            assert again.observation["total"] == 0 and again.reward is None
            assert (await env.step({"delta": 2})).observation["total"] == 2
