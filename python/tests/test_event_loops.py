"""Clients and servers leave nothing behind on an event loop they are done with.

grpc.aio completes every operation on the loop that started it, through one process-wide
completion queue that every loop using gRPC reads. If a client or server lets its loop close
while gRPC core still owes it a completion (a cancelled call whose final operations have not
come back yet), the next loop that reads the queue tries ``call_soon_threadsafe`` on the
closed loop and gets ``RuntimeError: Event loop is closed`` in its exception handler: noise in
a trainer's logs, and a random failure in any test suite that turns loop errors into test
errors (anyio's does). Scripts that run one ``asyncio.run`` per episode, ``.sync()`` clients
and servers embedded in tests all close loops, so this is the runtime's job, not the user's.

Each test runs the pattern many times, each time on a loop of its own that is closed at the
end, while a *watcher* loop in another thread (bound to gRPC, so it reads the queue) records
every error its exception handler sees. A missed late completion makes these tests pass
wrongly (never fail wrongly): they cannot flake by timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from openenv_testenvs import Counter
from openenv_testkit import server_thread

import openenv

pytestmark = pytest.mark.timing

ROUNDS = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Watcher:
    """A loop in its own thread that reads gRPC's completion queue and records errors."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loop-watcher", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(self._record)
        self.loop.run_until_complete(self._bind())
        self._ready.set()
        self.loop.run_forever()

    async def _bind(self) -> None:
        self.channel = grpc.aio.insecure_channel("127.0.0.1:9")  # binds this loop to gRPC's queue

    def _record(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.errors.append(repr(context.get("exception") or context.get("message")))

    def settle(self, target: str) -> list[str]:
        """Let late completions arrive (a few real round trips on the watcher's loop)."""

        async def traffic() -> None:
            async with grpc.aio.insecure_channel(target) as ch:
                for _ in range(20):
                    await ch.unary_unary("/openenv.v1.EnvironmentService/GetInfo")(b"", timeout=10)
                    await asyncio.sleep(0.01)

        asyncio.run_coroutine_threadsafe(traffic(), self.loop).result(30)
        return list(self.errors)

    def __enter__(self) -> Watcher:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        async def close() -> None:
            await self.channel.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def watched(**server_kwargs: Any) -> Iterator[tuple[Watcher, openenv.Server]]:
    with Watcher() as w, server_thread(Counter, **server_kwargs) as srv:
        yield w, srv
        assert w.settle(srv.address.removeprefix("grpc://")) == []


def test_a_closed_client_leaves_nothing_on_its_closed_loop() -> None:
    async def episode(url: str, seed: int) -> None:
        async with openenv.EnvClient(url) as env:
            await env.reset(seed=seed)
            await env.step({"delta": 1})

    with watched() as (_, srv):
        for i in range(ROUNDS):
            asyncio.run(episode(srv.address, i))  # one loop per episode, closed after it


def test_a_vector_client_and_pipelined_calls_leave_nothing_behind() -> None:
    async def run(url: str) -> None:
        async with openenv.EnvClient(url, num_envs=4) as env:
            await env.reset_batch(seeds=[1])
            await asyncio.gather(*(env.state(env_id=k) for k in range(4)))
            await env.step_batch([{"delta": 1}] * 4)

    with watched() as (_, srv):
        for _ in range(ROUNDS):
            asyncio.run(run(srv.address))


def test_a_refused_handshake_leaves_nothing_behind() -> None:
    async def refused(url: str) -> None:
        with pytest.raises(openenv.ResourceExhausted):
            async with openenv.EnvClient(url):
                pass

    with watched(max_sessions=1) as (_, srv), openenv.EnvClient(srv.address).sync():  # holds the only slot
        for _ in range(ROUNDS):
            asyncio.run(refused(srv.address))


def test_a_stream_the_server_ended_leaves_nothing_behind() -> None:
    async def reaped(url: str) -> None:
        env = openenv.EnvClient(url)
        await env.connect()
        with pytest.raises(openenv.EnvError):  # the server reaps the session while the client idles
            # Inside the block: a loaded machine may stall longer than the 0.2 s idle timeout
            # between the handshake and this reset, and then the reaper has ended it already.
            await env.reset()
            for _ in range(100):
                await asyncio.sleep(0.3)  # longer than the idle timeout: the reaper ends the stream
                await env.state(timeout=10)
        await env.close()

    # A resumable client releases its session through its token on close: the session it
    # asks for is gone, so the server refuses it and ends that stream too. 16 rounds: 40
    # failed 4 of 5 runs before that release waited for the refusal (4 rounds rarely did).
    with watched(idle_timeout_s=0.2) as (_, srv):
        for _ in range(16):
            asyncio.run(reaped(srv.address))


def test_an_abandoned_connect_leaves_nothing_behind() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts TCP, never speaks HTTP/2: the channel never gets ready
    url = f"grpc://127.0.0.1:{silent.getsockname()[1]}"

    async def attempt() -> None:
        with pytest.raises(openenv.Unavailable):
            await openenv.EnvClient(url, connect_timeout=0.2).connect()

    try:
        with watched() as _:
            for _ in range(ROUNDS):
                asyncio.run(attempt())
    finally:
        silent.close()


def test_sync_clients_leave_nothing_behind() -> None:
    with watched() as (_, srv):
        for i in range(ROUNDS):
            with openenv.EnvClient(srv.address).sync() as env:
                env.reset(seed=i)
                env.step({"delta": 2})


def test_a_stopped_server_leaves_nothing_on_its_closed_loop() -> None:
    with Watcher() as w:
        for i in range(4):
            env = openenv.EnvClient(f"grpc://127.0.0.1:{_free_port()}").sync()
            with server_thread(Counter, port=int(env.client.base_url.rsplit(":", 1)[1])):
                env.connect()
                env.reset(seed=i)
            # the server stopped (and its loop closed) with this session open
            with pytest.raises(openenv.EnvError):
                env.step({"delta": 1})
            env.close()
        with server_thread(Counter) as probe:
            assert w.settle(probe.address.removeprefix("grpc://")) == []
