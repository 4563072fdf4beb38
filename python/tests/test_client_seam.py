"""The Connection seam's written guarantees (openenv.client.connection), over every client
transport: gRPC on grpc.aio and on grpclib, the binary WebSocket, OpenEnv's JSON ``/ws`` (our
server: answers carry ids) and in-process. They share one implementation of the protocol's client
half (openenv.client.session.ClientSession over each transport's Channel, issue 55); this suite
is what keeps every transport to it. One real Host serves the socket transports (gRPC, HTTP and
the binary listener); no mocks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import pytest

import openenv
from openenv.errors import EnvError
from openenv.runtime.limits import Limits
from openenv.settings import ServerSettings
from openenv.v1 import environment_pb2

pytestmark = [pytest.mark.anyio]

TRANSPORTS = ("grpc", "grpclib", "binary", "json-ws", "inprocess")
WAIT = 30.0


class Seam(openenv.Environment):
    """``{"sleep": s}`` answers ``{"slept": s}`` after ``s`` seconds; ``{"hold": true}`` waits for
    :attr:`release`; ``{"bad": true}`` is refused with ``InvalidAction`` (the session goes on)."""

    release: ClassVar[asyncio.Event | None] = None

    async def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> Any:
        return {"slept": 0}

    async def step(self, action: dict[str, Any]) -> Any:
        if action.get("bad"):
            raise openenv.InvalidAction("a bad action")
        if action.get("hold"):
            assert Seam.release is not None
            await asyncio.wait_for(Seam.release.wait(), WAIT)
            return {"held": True}
        await asyncio.sleep(float(action["sleep"]))
        return {"slept": action["sleep"]}


@contextlib.asynccontextmanager
async def client(transport: str, **kwargs: Any) -> AsyncIterator[openenv.EnvClient]:
    """A connected client of a fresh :class:`Seam` server over ``transport``; ``kwargs``: the
    server's :class:`~openenv.runtime.limits.Limits` fields."""
    Seam.release = asyncio.Event()
    if transport == "inprocess":
        from openenv.testing import InProcessServer

        async with InProcessServer(Seam, **kwargs) as server, server.client() as env:
            yield env
        return
    settings = ServerSettings(limits=Limits(**kwargs))
    host = openenv.Host(Seam, "127.0.0.1", 0, http_port=0, binary_port=0, settings=settings)
    await asyncio.wait_for(host.start(), WAIT)
    try:
        url, kw = {
            "grpc": (host.address, {}),
            "grpclib": (host.address, {"grpc_engine": "grpclib"}),
            "binary": (f"ws://127.0.0.1:{host.binary.port}/v1/session", {}),
            "json-ws": (host.http_url, {}),
        }[transport]
        async with openenv.EnvClient(url, **kw) as env:
            yield env
    finally:
        Seam.release.set()  # never leave a step waiting when the server stops
        await asyncio.wait_for(host.stop(1.0), WAIT)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_concurrent_requests_are_answered_by_id_each_with_its_own_answer(transport: str) -> None:
    """Pipelining: requests issued together go out in call order and each caller gets the
    answer to its own request, although they finish in another order on the server."""
    async with client(transport) as env:
        await env.reset()
        sleeps = [0.05, 0.0, 0.03, 0.0, 0.01, 0.02]
        results = await asyncio.gather(*(env.step({"sleep": s}, timeout=WAIT) for s in sleeps))
        assert [r.observation["slept"] for r in results] == sleeps


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_client_side_timeout_never_shifts_a_later_answer(transport: str) -> None:
    """A call given up on (``ClientTimeout``, not fatal) leaves the session usable, and its
    late answer is never taken for the answer to the next request."""
    async with client(transport) as env:
        await env.reset()
        with pytest.raises(openenv.ClientTimeout) as e:
            await env.step({"hold": True}, timeout=0.05)
        assert not e.value.fatal
        assert Seam.release is not None
        Seam.release.set()  # the late answer ({"held": true}) now comes, ahead of the next one
        r = await env.step({"sleep": 0.0}, timeout=WAIT)
        assert r.observation == {"slept": 0.0}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_error_answers_are_returned_and_the_session_goes_on(transport: str) -> None:
    """An error answer of the protocol is raised to its caller only (not fatal); the
    connection has not ended and the next request is answered."""
    async with client(transport) as env:
        await env.reset()
        with pytest.raises(openenv.InvalidArgument) as e:  # InvalidAction, on the wire INVALID_ARGUMENT
            await env.step({"bad": True}, timeout=WAIT)
        assert not e.value.fatal
        assert env.connection is not None and env.connection.ended is None
        assert (await env.step({"sleep": 0.0}, timeout=WAIT)).observation == {"slept": 0.0}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_session_the_server_ends_sets_ended_and_calls_on_end_once(transport: str) -> None:
    """The server ends the session (its idle timeout): ``ended`` says why (fatal), every later
    request raises it, and the ``on_end`` callback ran once."""
    async with client(transport, idle_timeout_s=0.3) as env:
        conn = env.connection
        assert conn is not None
        reasons: list[EnvError] = []
        conn.on_end(reasons.append)
        for _ in range(int(WAIT / 0.05)):
            if conn.ended is not None:
                break
            await asyncio.sleep(0.05)
        assert conn.ended is not None and conn.ended.fatal
        assert reasons == [conn.ended]
        with pytest.raises(EnvError) as e:
            await env.step({"sleep": 0.0}, timeout=WAIT)
        assert e.value is conn.ended or e.value.code == conn.ended.code


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_close_ends_the_session_and_later_requests_raise(transport: str) -> None:
    """``close`` ends the session the protocol's way and releases the transport; a request
    after it raises a fatal ``FailedPrecondition`` and the callback is not called for it."""
    async with client(transport) as env:
        await env.reset()
        conn = env.connection
        assert conn is not None
        reasons: list[EnvError] = []
        conn.on_end(reasons.append)
        await conn.close()
        assert conn.ended is not None
        with pytest.raises(openenv.FailedPrecondition) as e:
            await conn.request(environment_pb2.SessionRequest(state=environment_pb2.StateRequest()))
        assert e.value.fatal
        assert reasons == []
