"""``EnvClient`` over http(s)/ws(s) URLs (openenv.client.ws) against our HTTP side."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from bridge_envs import RandomWalk
from bridge_kit import WAIT_S, served
from test_ws_protocol import Slow

import openenv
from echo_env import EchoEnv, EchoEnvironment
from openenv import CallToolAction

pytestmark = pytest.mark.anyio


class Held(Slow):
    """``Slow``, plus ``{"hold": true}`` steps that wait (on the loop) until the test sets ``release``."""

    release: ClassVar[asyncio.Event]

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        if action.get("hold"):
            await type(self).release.wait()
            return {"held": True}
        return await super().step(action)


async def test_quick_start_async_and_sync() -> None:
    async with served(EchoEnvironment) as srv:
        async with EchoEnv(base_url=srv.http_url) as env:
            r = await env.reset()
            assert r.metadata == {"message": "Echo environment ready!"} and r.step_count == 0
            r = await env.step(CallToolAction("echo_message", {"message": "Hello, World!"}))
            assert r.observation.result.data == "Hello, World!"
            assert r.reward == pytest.approx(1.3) and not r.done and r.step_count == 1
            assert [t.name for t in await env.list_tools()] == ["echo_message", "echo_with_length"]
            assert (await env.call_tool("echo_with_length", {"message": "abc"})).data == {"message": "abc", "length": 3}
            assert (await env.state()).state == {"echoed": 2}
            with pytest.raises(openenv.NotFound):
                await env.step(CallToolAction("nope", {}))

        def sync_quick_start() -> tuple[object, float | None]:
            with EchoEnv(base_url=srv.http_url).sync() as env:
                env.reset()
                r = env.step(CallToolAction("echo_message", {"message": "sync"}))
                return r.observation.result.data, r.reward

        assert await asyncio.to_thread(sync_quick_start) == ("sync", pytest.approx(0.4))
        for url in (srv.http_url.replace("http://", "ws://"), srv.http_url + "/ws"):
            async with EchoEnv(url) as env:
                assert (await env.reset()).step_count == 0


async def test_errors_map_to_the_error_table() -> None:
    async with served(RandomWalk, max_sessions=1) as srv:
        async with openenv.EnvClient(srv.http_url) as env:
            assert env.info.name == "random_walk" and env.session_id
            with pytest.raises(openenv.FailedPrecondition):
                await env.step({"move": 1})
            await env.reset(seed=1)
            with pytest.raises(openenv.InvalidArgument) as e:
                await env.step({"move": 9})
            assert not e.value.fatal
            with pytest.raises(openenv.ResourceExhausted) as e:
                async with openenv.EnvClient(srv.http_url) as second:
                    await second.reset()
            assert e.value.fatal
            assert (await env.step({"move": 1})).step_count == 1


async def test_client_timeout_never_shifts_replies() -> None:
    Held.release = asyncio.Event()
    async with served(Held) as srv, openenv.EnvClient(srv.http_url) as env:
        try:
            await env.reset()
            with pytest.raises(openenv.DeadlineExceeded) as e:  # the step is held until released: only
                await env.step({"hold": True}, timeout=0.05)  # the client's timeout can end this call
            assert not e.value.fatal, "our bridge echoes ids: the session survives a client-side timeout"
            Held.release.set()  # the late answer ({"held": true}) now comes, ahead of the next one
            r = await env.step({"sleep": 0}, timeout=WAIT_S)
            assert r.observation == {"slept": 0}, "the late answer was not taken for this one"
            # pipelining: concurrent calls are answered in order, each with its own reply
            rs = await asyncio.gather(*(env.step({"sleep": i / 100}) for i in range(5)))
            assert [x.observation["slept"] for x in rs] == [i / 100 for i in range(5)]
            with pytest.raises(openenv.DeadlineExceeded) as e:  # the server-side per-step timeout
                await env.step({"sleep": 3600}, step_timeout=0.05)  # (only the timeout ends it)
            assert (await env.state()).status is openenv.EpisodeStatus.ABORTED
        finally:
            Held.release.set()  # never leave a step waiting when the server stops
