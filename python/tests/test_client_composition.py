"""The client composed through the Connection seam (issue 29, item 5): the in-process
connection and openenv.testing, VectorEnvClient as EnvClient's sibling, ConnectionOptions,
connection decorators (MapErrors) and resources a client owns. Real engine and servers, no mocks;
behaviours shared with gRPC run over both (``transport``)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from openenv_testenvs import Counter, Scripted
from openenv_testkit import TRANSPORTS, WAIT_S, serving, wait_until

import openenv
import openenv.testing
from openenv.client import (
    BaseEnvClient,
    ConnectionOptions,
    EnvClient,
    GrpcConnection,
    MapErrors,
    VectorEnvClient,
    WsConnection,
)
from openenv.errors import EnvError, Unavailable
from openenv.security import TokenSet

pytestmark = [pytest.mark.anyio]


async def _released(manager: Any, env_cls: Any, closed: int = 1) -> None:
    await wait_until(lambda: manager.active == 0 and env_cls.closed >= closed, what="the session released")
    assert env_cls.closed == closed


# ---------------------------------------------------------------- one behaviour, both transports


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_close_frees_the_session_and_later_calls_raise(transport: str) -> None:
    async with serving(transport, Counter) as (manager, make):
        env = make()
        await env.connect()
        assert (await env.reset(seed=3)).observation["total"] == 3
        await env.close()
        await _released(manager, Counter)
        with pytest.raises(openenv.FailedPrecondition) as exc:
            await env.step({"delta": 1})
        assert exc.value.fatal


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_session_the_server_ends_sets_ended_and_calls_on_end_once(transport: str) -> None:
    async with serving(transport, Counter, idle_timeout_s=0.3) as (manager, make):
        async with make() as env:
            conn = env.connection
            reasons: list[EnvError] = []
            conn.on_end(reasons.append)
            await wait_until(lambda: conn.ended is not None, what="the idle session to be reaped")
            assert isinstance(conn.ended, openenv.DeadlineExceeded) and conn.ended.fatal
            assert reasons == [conn.ended]
            with pytest.raises(openenv.DeadlineExceeded):
                await env.state()
        await _released(manager, Counter)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_capacity_refusal_and_tokens(transport: str) -> None:
    async with serving(transport, Counter, max_sessions=1, tokens=TokenSet(["s3cret"])) as (_, make):
        with pytest.raises(openenv.Unauthenticated):
            await make(token="wrong").connect()
        async with make(token="s3cret") as env:
            await env.reset()
            with pytest.raises(openenv.ResourceExhausted) as exc:
                await make(token="s3cret").connect()
            assert exc.value.fatal


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_message_limits(transport: str) -> None:
    async with serving(transport, Scripted, max_message_bytes=64 * 1024) as (_, make):
        async with make() as env:
            await env.reset()
            assert env.connection.max_message_bytes == 64 * 1024  # the server's limit, from the handshake
            with pytest.raises(openenv.ResourceExhausted) as exc:  # refused before it is sent
                await env.step({"op": "echo", "value": "x" * 70_000})
            assert not exc.value.fatal
            with pytest.raises(openenv.ResourceExhausted) as exc:  # the reply: refused in band
                await env.step({"op": "big", "n": 100_000})
            assert not exc.value.fatal
            assert (await env.step({"op": "echo", "value": "after"})).observation == "after"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_vector_client_is_a_sibling_of_env_client(transport: str) -> None:
    async with serving(transport, Counter, max_sessions=8) as (manager, make):
        async with make(VectorEnvClient, num_envs=4) as envs:
            assert isinstance(envs, BaseEnvClient) and not isinstance(envs, EnvClient)
            assert not hasattr(envs, "reset") and not hasattr(envs, "step") and not hasattr(envs, "fork")
            batch = await envs.reset_batch(seeds=[10])
            assert [o["total"] for o in batch.observations] == [10, 11, 12, 13]
            batch = await envs.step_batch([{"delta": k} for k in range(4)])
            assert [o["total"] for o in batch.observations] == [10, 12, 14, 16]
            assert (await envs.state(env_id=2)).state["total"] == 14
        await _released(manager, Counter, closed=4)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_forks_connect_through_the_parent_connections_sibling(transport: str) -> None:
    from openenv_snapshot_envs import Ledger

    async with serving(transport, Ledger) as (_, make):
        async with make() as env:
            await env.reset(seed=1)
            await env.step(4)
            forks = await env.fork(2)
            try:
                assert [type(f.connection) for f in forks] == [type(env.connection)] * 2
                assert [f.resources for f in forks] == [(), ()]
                for k, f in enumerate(forks):
                    r = await f.step(k + 1)
                    assert r.step_count == 2 and r.observation["entries"] == 2
            finally:
                for f in forks:
                    await f.close()


# ---------------------------------------------------------------- openenv.testing


async def test_testing_client_serves_the_environment_in_process() -> None:
    async with openenv.testing.client(Counter, client_kwargs={"options": {"tag": "t"}}) as env:
        assert isinstance(env, EnvClient) and env.base_url == "inprocess://Counter"
        await env.reset()
        results = await asyncio.wait_for(asyncio.gather(*(env.step({"delta": 1}) for _ in range(20))), WAIT_S)
        assert [r.step_count for r in results] == list(range(1, 21))
        assert results[-1].observation == {"total": 20, "tag": "t"}
    assert Counter.closed == 1  # leaving the block closed the session and its environment


def test_testing_sync_client_works_inside_a_running_loop() -> None:
    async def inside() -> Any:
        with openenv.testing.sync_client(Counter) as env:  # its loop runs in its own thread
            env.reset(seed=2)
            return env.step({"delta": 3}).observation["total"]

    assert asyncio.run(inside()) == 5
    assert Counter.closed == 1


def test_sync_view_of_a_vector_client_refuses_reset() -> None:
    with openenv.testing.sync_client(
        Counter, client_cls=VectorEnvClient, client_kwargs={"num_envs": 2}, max_sessions=2
    ) as envs:
        with pytest.raises(openenv.FailedPrecondition, match="reset_batch"):
            envs.reset()
        assert len(envs.reset_batch().results) == 2


# ---------------------------------------------------------------- ConnectionOptions


def test_connection_options_are_validated_frozen_and_merged() -> None:
    opts = ConnectionOptions(max_message_bytes=1 << 20, token="t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.token = "u"  # type: ignore[misc]
    for bad in ({"max_message_bytes": 0}, {"connect_timeout": -1}, {"keepalive_s": float("inf")}, {"token": "a\nb"}):
        with pytest.raises(ValueError):
            ConnectionOptions(**bad)
    for bad in ({"max_message_bytes": 1.5}, {"client_cert": ("only-one",)}, {"connect_timeout": "3"}):
        with pytest.raises(TypeError):
            ConnectionOptions(**bad)
    assert opts.merged(token=None, keepalive_s=5) == dataclasses.replace(opts, keepalive_s=5)
    assert opts.merged(ping_timeout_s=3).keepalive_timeout_s == 3
    with pytest.raises(TypeError, match="unknown connection option"):
        opts.merged(nope=1)


def test_old_keywords_still_configure_the_connection() -> None:
    env = EnvClient("grpc://127.0.0.1:1", max_message_bytes=1024, token="t", connect_timeout=2.0)
    assert (env.max_message_bytes, env.token, env.connect_timeout) == (1024, "t", 2.0)
    given = ConnectionOptions(keepalive_s=7, ca_file="ca.pem")
    env = EnvClient("grpc://127.0.0.1:1", connection_options=given, max_message_bytes=2048)
    assert env.connection_options == dataclasses.replace(given, max_message_bytes=2048)
    conn = openenv.client.connect_url("grpc://127.0.0.1:1", options=env.connection_options, token="x")
    assert isinstance(conn, GrpcConnection) and conn.options.max_message_bytes == 2048 and conn.token == "x"
    assert conn.sibling().options == conn.options
    ws = WsConnection("http://127.0.0.1:1", keepalive_s=0, ping_timeout_s=4)
    assert (ws.keepalive_s, ws.ping_timeout_s, ws.options.keepalive_timeout_s) == (0, 4, 4)


# ---------------------------------------------------------------- decorators and owned resources


async def test_map_errors_rewrites_what_the_transport_raises_not_the_answers() -> None:
    def name_it(e: EnvError) -> EnvError:
        return Unavailable(f"mapped: {e.message}", fatal=e.fatal) if e.fatal else e

    async with openenv.testing.InProcessServer(Counter, idle_timeout_s=0.3) as server:
        conn = MapErrors(server.connection(), name_it)
        async with EnvClient("inprocess://Counter", connection=conn) as env:
            await env.reset()
            with pytest.raises(openenv.InvalidArgument):  # an error answer: returned, raised by the client as is
                await env.step({"delta": 2000})
            reasons: list[EnvError] = []
            conn.on_end(reasons.append)
            await wait_until(lambda: conn.ended is not None, what="the idle session to be reaped")
            with pytest.raises(Unavailable, match="mapped: session idle"):
                await env.state()
            assert conn.ended is conn.ended and isinstance(conn.ended, Unavailable)
            assert [type(r) for r in reasons] == [Unavailable]
            assert isinstance(conn.sibling(), MapErrors)


async def test_owned_resources_are_released_with_the_client_last_first() -> None:
    released: list[str] = []

    class Sync:
        def close(self) -> None:
            released.append("sync")

    class Async:
        async def aclose(self) -> None:
            released.append("async")

    def boom() -> None:
        released.append("boom")
        raise RuntimeError("boom")

    async with openenv.testing.InProcessServer(Counter) as server:
        env = server.client()
        env.own(Sync())
        env.own("a handle", boom)
        env.own(Async())
        assert len(env.resources) == 3
        await env.connect()
        with pytest.raises(RuntimeError, match="boom"):  # the first failure, after every release
            await env.close()
        assert released == ["async", "boom", "sync"] and env.resources == ()
        assert server.manager.active == 0  # the session closed before its resources
        with pytest.raises(TypeError):
            env.own(object())
