"""Vectorised sessions (RFC 0002) over a real socket: slots are freed on every way out,
batches step instances independently, and the plain/vector request rules hold.
(The conformance suite's ``vector`` level certifies the semantics black-box.)"""

from __future__ import annotations

import pytest
from openenv_testenvs import AsyncCounter, Counter
from openenv_testkit import running, wait_released

import openenv

pytestmark = [pytest.mark.anyio, pytest.mark.timing]

N = 16


@pytest.mark.parametrize("env_cls", [Counter, AsyncCounter])
async def test_close_frees_every_instance(env_cls: type[Counter]) -> None:
    async with running(env_cls) as srv:
        async with openenv.EnvClient(srv.address, num_envs=N) as c:
            await c.reset_batch(seeds=[100])
            b = await c.step_batch([{"delta": i} for i in range(N)])
            assert [r.observation["total"] for r in b.results] == [100 + k + k for k in range(N)]
            assert srv.manager.active == N
        await wait_released(srv, env_cls, closed=N)


@pytest.mark.parametrize("env_cls", [Counter, AsyncCounter])
async def test_abrupt_disconnect_frees_every_instance(env_cls: type[Counter]) -> None:
    async with running(env_cls) as srv:
        c = openenv.EnvClient(srv.address, num_envs=N)
        await c.connect()
        await c.reset_batch()
        await c.abort()  # cancel the stream without a close request, as a crashed trainer would
        await wait_released(srv, env_cls, closed=N)
        async with openenv.EnvClient(srv.address, num_envs=env_cls.max_sessions) as full:
            assert len((await full.reset_batch()).results) == env_cls.max_sessions  # every slot is back


async def test_capacity_counts_every_instance() -> None:
    async with running(Counter, max_sessions=N) as srv:
        async with openenv.EnvClient(srv.address, num_envs=N - 1):
            with pytest.raises(openenv.ResourceExhausted):
                async with openenv.EnvClient(srv.address, num_envs=2):
                    pass
            async with openenv.EnvClient(srv.address) as one:  # exactly one slot left
                await one.reset()
        await wait_released(srv, Counter, closed=N)


async def test_plain_and_vector_request_rules() -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address, num_envs=2) as vec:
            with pytest.raises(openenv.FailedPrecondition):
                await vec.step({"delta": 1})
            await vec.reset_batch()
            assert (await vec.state(env_id=1)).step_count == 0
        async with openenv.EnvClient(srv.address) as plain:
            with pytest.raises(openenv.FailedPrecondition):
                await plain.step_batch([{"delta": 1}])
            await plain.reset()
            assert (await plain.step({"delta": 2})).observation["total"] == 2
