"""Helpers of the runtime's tests: servers on real loopback sockets, raw protocol
sessions over the generated stub, and bounded waits. Imported by the test modules as
``openenv_testkit`` (``conftest.py`` puts this directory on ``sys.path``).

Nothing here mocks gRPC: every test talks to an ``openenv.Server`` (in-process, on the
test's event loop) or to an ``openenv serve`` subprocess over 127.0.0.1 with port 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import openenv
from openenv.v1 import environment_pb2, environment_pb2_grpc

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent.parent

WAIT_S = 10.0
"""Upper bound of every wait in these tests (never a timing assertion)."""


@contextlib.contextmanager
def server_thread(factory: type[openenv.Environment], **kwargs: object) -> Iterator[openenv.Server]:
    """An ``openenv.Server`` on its own event loop in a daemon thread (the test thread stays sync)."""
    loop = asyncio.new_event_loop()
    kwargs.setdefault("port", 0)
    port = kwargs.pop("port")
    srv = openenv.Server(factory, "127.0.0.1", port, settings=openenv.ServerSettings.of(None, kwargs))  # type: ignore[arg-type]
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(srv.start())
        started.set()
        loop.run_forever()

    t = threading.Thread(target=run, name="test-server", daemon=True)
    t.start()
    assert started.wait(10), "server thread did not start"
    try:
        yield srv
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(1.0), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()


@contextlib.asynccontextmanager
async def running(factory: Any, **kwargs: Any) -> AsyncIterator[openenv.Server]:
    """An ``openenv.Server`` on 127.0.0.1, port 0, stopped (drained) on exit."""
    settings = kwargs.pop("settings", None)
    srv = openenv.Server(factory, "127.0.0.1", 0, settings=openenv.ServerSettings.of(settings, kwargs))
    await asyncio.wait_for(srv.start(), WAIT_S)
    try:
        yield srv
    finally:
        await asyncio.wait_for(srv.stop(1.0), WAIT_S + 5)


TRANSPORTS = ("grpc", "inprocess")
"""The client transports that behaviour tests run over (``@pytest.mark.parametrize("transport", TRANSPORTS)``)."""


@contextlib.asynccontextmanager
async def serving(transport: str, factory: Any, **kwargs: Any) -> AsyncIterator[tuple[Any, Callable[..., Any]]]:
    """``factory`` served over ``transport``: (its SessionManager, a maker of unconnected clients
    ``make(client_cls=EnvClient, **client_kwargs)``). ``grpc``: a real gRPC server on a port;
    ``inprocess``: :class:`openenv.testing.InProcessServer` (the same engine, no socket)."""
    if transport == "grpc":
        async with running(factory, **kwargs) as srv:

            def make(client_cls: Any = openenv.EnvClient, **kw: Any) -> Any:
                return client_cls(srv.address, **kw)

            yield srv.manager, make
    else:
        from openenv.testing import InProcessServer

        async with InProcessServer(factory, **kwargs) as server:
            yield server.manager, server.client


def target(server: openenv.Server) -> str:
    """host:port of a server, for raw channels."""
    return f"127.0.0.1:{server.port}"


async def wait_until(pred: Callable[[], bool], timeout: float = WAIT_S, what: str = "condition") -> None:
    """Poll ``pred`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.01)


async def until_raises(
    call: Callable[[], Awaitable[Any]], exc_type: type[BaseException], timeout: float = WAIT_S
) -> BaseException:
    """Repeat ``call`` until it raises ``exc_type`` (returned); fail after ``timeout`` s.
    For "the stream ends soon": answers may still arrive until the server acts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(call(), timeout)
        except exc_type as e:
            return e
        await asyncio.sleep(0.02)
    pytest.fail(f"{exc_type.__name__} not raised within {timeout:g} s")


async def wait_released(server: openenv.Server, env_cls: Any, closed: int = 1) -> None:
    """Wait until no session holds a slot and ``env_cls.close()`` ran ``closed`` times
    (it runs just after the slot is freed); then require exactly that many."""
    await wait_until(
        lambda: server.manager.active == 0 and env_cls.closed >= closed,
        what=f"sessions released and {env_cls.__name__}.close() called {closed} time(s)",
    )
    assert env_cls.closed == closed, f"{env_cls.__name__}.close() called {env_cls.closed} times, expected {closed}"


class StreamEnded(Exception):
    """Raised by :meth:`RawSession.recv` when the stream ended (EOF or a gRPC status)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class RawSession:
    """One ``Session`` stream driven with the generated stub: the protocol, byte for byte.

    Use as ``async with RawSession(target) as s:``. Every read is bounded by ``WAIT_S``.
    """

    def __init__(self, tgt: str, *, options: list[tuple[str, Any]] | None = None) -> None:
        self.target = tgt
        self.channel = grpc.aio.insecure_channel(tgt, options=options or [])
        self.stub = environment_pb2_grpc.EnvironmentServiceStub(self.channel)
        self.call: Any = self.stub.Session()
        self._next = 1000

    async def __aenter__(self) -> RawSession:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """End the stream as a client should (half-close, read to its end, bounded), so that
        no gRPC operation is still owed to this loop when the test's loop closes; cancel
        only a stream that does not end."""
        if self.call.done():  # ended (or cancelled by the test): nothing is owed
            await self.channel.close()
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.call.done_writing(), WAIT_S)
        with contextlib.suppress(Exception):

            async def drain() -> None:
                while await self.call.read() is not grpc.aio.EOF:
                    pass
                await self.call.code()

            await asyncio.wait_for(drain(), WAIT_S)
        self.call.cancel()
        await self.channel.close()

    def new_id(self) -> int:
        self._next += 7
        return self._next

    async def send(self, req: environment_pb2.SessionRequest | None = None, **kind: Any) -> int:
        """Write one request (built from ``kind`` when not given); returns its request_id."""
        if req is None:
            req = environment_pb2.SessionRequest(**kind)
        if not req.request_id:
            req.request_id = self.new_id()
        await asyncio.wait_for(self.call.write(req), WAIT_S)
        return req.request_id

    async def recv(self) -> environment_pb2.SessionResponse:
        """The next response; raises :class:`StreamEnded` when the stream is over."""
        try:
            resp = await asyncio.wait_for(self.call.read(), WAIT_S)
        except grpc.aio.AioRpcError as e:
            raise StreamEnded(e.code(), e.details() or "") from None
        if resp is grpc.aio.EOF:
            code = await asyncio.wait_for(self.call.code(), WAIT_S)
            raise StreamEnded(code, await self.call.details() or "")
        return resp

    async def request(
        self, req: environment_pb2.SessionRequest | None = None, **kind: Any
    ) -> environment_pb2.SessionResponse:
        """Send one request and read its answer (checking the request id)."""
        rid = await self.send(req, **kind)
        resp = await self.recv()
        assert resp.request_id == rid, f"answer to {resp.request_id}, expected {rid}"
        return resp

    async def handshake(
        self, version: str = openenv.PROTOCOL_VERSION, **fields: Any
    ) -> environment_pb2.SessionResponse:
        return await self.request(handshake=environment_pb2.HandshakeRequest(protocol_version=version, **fields))

    async def open(self, **fields: Any) -> environment_pb2.HandshakeResponse:
        """Handshake and require success."""
        resp = await self.handshake(**fields)
        assert resp.WhichOneof("kind") == "handshake", resp
        return resp.handshake

    async def ended(self) -> StreamEnded:
        """Read until the stream ends (no further answers allowed) and return how it ended."""
        try:
            extra = await self.recv()
        except StreamEnded as e:
            return e
        pytest.fail(f"expected the stream to end, got another answer: {extra}")


def error_of(resp: environment_pb2.SessionResponse) -> Any:
    """The ``Status`` of an error answer (fails the test for any other answer)."""
    assert resp.WhichOneof("kind") == "error", f"expected an error answer, got {resp}"
    return resp.error


def ok(resp: environment_pb2.SessionResponse, kind: str) -> Any:
    """The result of a successful answer of ``kind``."""
    assert resp.WhichOneof("kind") == kind, f"expected {kind}, got {resp}"
    return getattr(resp, kind)


async def get_info(tgt: str) -> environment_pb2.EnvironmentInfo:
    """GetInfo over a fresh channel (also a liveness probe of the server)."""
    async with grpc.aio.insecure_channel(tgt) as ch:
        resp = await environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(
            environment_pb2.GetInfoRequest(), timeout=WAIT_S
        )
    return resp.info
