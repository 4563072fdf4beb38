"""The gRPC transport: real ``EnvironmentService`` sessions and unary calls to a target
(``grpc://HOST:PORT``), driven synchronously.

Checks (and Hypothesis, which is synchronous) call plain methods; underneath, one private
asyncio event loop per thread (shared by its wires, never closed: see :func:`_thread_loop`)
runs grpc.aio. Each :class:`Session` is one
``EnvironmentService.Session`` stream whose answers are read by a background task into a
queue, so a check can pipeline requests, read with a timeout, cancel, half-close, or send
raw bytes (the request serializer passes ``bytes`` through untouched).

Nothing here interprets the contract beyond building and decoding messages: the rules live
in the checks.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from openenv.client.urls import parse_url
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import environment_pb2_grpc, load_pb2
from openenv_conformance.errors import Violation
from openenv_conformance.transport.base import EPISODE_FIELDS, GRPC, NoAnswer, RequestBuilder, StreamEnd

__all__ = ["SERVICE", "Session", "Wire"]

SERVICE = "openenv.v1.EnvironmentService"
SESSION_METHOD = f"/{SERVICE}/Session"

T = TypeVar("T")


_local = threading.local()


def _thread_loop() -> asyncio.AbstractEventLoop:
    """The event loop of every :class:`Wire` of this thread, never closed.

    grpc.aio completes each operation on the loop that started it, through a queue every
    loop using gRPC reads; the checks cancel streams on purpose (abrupt disconnects), and a
    cancelled call still owes its loop completions. Closing a wire's loop would turn those
    into "Event loop is closed" errors in whichever loop reads the queue next (another
    wire's, or the event loop of a test suite the certifier runs in); a loop that stays
    open simply receives them the next time it runs."""
    loop = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
    return loop


def _serialize(m: Any) -> bytes:
    return bytes(m) if isinstance(m, (bytes, bytearray)) else m.SerializeToString()


class Wire:
    """Channels, sessions and unary calls to one target (``grpc://host:port``).

    Every blocking call is bounded by ``timeout`` seconds (:class:`NoAnswer` when it
    elapses). Not thread-safe: use from one thread.
    """

    kind = "grpc"

    def __init__(self, url: str, *, timeout: float = 10.0, token: str | None = None) -> None:
        self.token = token
        scheme, self.address = parse_url(url)
        if scheme != "grpc":
            raise ValueError(f"{url!r}: the wire speaks grpc:// only")
        self.url = url
        self.timeout = timeout
        self.loop = _thread_loop()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._channels: list[grpc.aio.Channel] = []
        self._anonymous: set[grpc.aio.Channel] = set()
        self.sessions: list[Session] = []
        self.channel = self.new_channel()
        self.stub = environment_pb2_grpc.EnvironmentServiceStub(self.channel)

    @property
    def features(self) -> frozenset[str]:
        """Everything the checks can express (see :mod:`openenv_conformance.transport`)."""
        return frozenset({GRPC, EPISODE_FIELDS})

    # -- plumbing

    def run(self, aw: Awaitable[T], timeout: float | None = None, what: str = "the call") -> T:
        """Run ``aw`` on the wire's loop, for at most ``timeout`` seconds."""
        t = self.timeout if timeout is None else timeout
        try:
            return self.loop.run_until_complete(asyncio.wait_for(aw, t))
        except TimeoutError:
            raise NoAnswer(f"no answer to {what} within {t:g} s") from None

    def new_channel(self, *, anonymous: bool = False) -> grpc.aio.Channel:
        """A new connection to the target (its own HTTP/2 connection); its calls carry the
        bearer token, unless ``anonymous``."""

        async def make() -> grpc.aio.Channel:
            return grpc.aio.insecure_channel(
                self.address,
                options=[
                    ("grpc.max_send_message_length", -1),
                    ("grpc.max_receive_message_length", -1),
                    ("grpc.enable_retries", 0),
                    ("grpc.use_local_subchannel_pool", 1),
                ],
            )

        ch = self.run(make())
        self._channels.append(ch)
        if anonymous:
            self._anonymous.add(ch)
        return ch

    def metadata(self, channel: grpc.aio.Channel | None = None) -> tuple[tuple[str, str], ...] | None:
        """The call metadata of a call on ``channel``: the bearer token (RFC 0003), except on
        anonymous channels. Passed per call (an interceptor would wrap stream calls in async
        generators that grpc.aio then closes noisily on cancellation)."""
        if not self.token or (channel is not None and channel in self._anonymous):
            return None
        return (("authorization", f"Bearer {self.token}"),)

    def close_channel(self, channel: grpc.aio.Channel) -> None:
        """Close a connection at once, cancelling its calls (an abrupt disconnect)."""
        self.run(channel.close(None))

    def close(self) -> None:
        """End every session and close every channel (the thread's loop stays open)."""
        for s in list(self.sessions):
            s.cancel()
        for ch in self._channels:
            try:
                self.run(ch.close(None), timeout=5)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        pending = [t for t in self._tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.wait(pending, timeout=5))

    # -- unary calls

    def get_info(self, timeout: float | None = None) -> pb.EnvironmentInfo:
        """``GetInfo``; raises ``grpc.aio.AioRpcError`` or :class:`NoAnswer`."""
        t = self.timeout if timeout is None else timeout

        async def call() -> pb.GetInfoResponse:  # calls are created on the wire's own loop
            return await self.stub.GetInfo(pb.GetInfoRequest(), timeout=t, metadata=self.metadata())

        return self.run(call(), t + 1, "GetInfo").info

    def get_load(self, timeout: float | None = None) -> load_pb2.ServerLoad:
        """``GetLoad`` (RFC 0005); raises ``grpc.aio.AioRpcError`` or :class:`NoAnswer`."""
        t = self.timeout if timeout is None else timeout

        async def call() -> load_pb2.GetLoadResponse:
            return await self.stub.GetLoad(load_pb2.GetLoadRequest(), timeout=t, metadata=self.metadata())

        return self.run(call(), t + 1, "GetLoad").load

    def health(self, service: str = "", timeout: float | None = None) -> str:
        """The health status name of ``service`` (``SERVING``, ``NOT_SERVING``, ...), or
        ``"<gRPC code>"`` when the call itself fails."""
        t = self.timeout if timeout is None else timeout
        stub = health_pb2_grpc.HealthStub(self.channel)

        async def call() -> health_pb2.HealthCheckResponse:
            return await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=t)

        try:
            r = self.run(call(), t + 1, "Health.Check")
        except grpc.aio.AioRpcError as e:
            return f"<{e.code().name}>"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)

    def reflection(self, symbol: str = SERVICE) -> tuple[list[str], list[bytes]]:
        """(services listed by server reflection, serialized files containing ``symbol``)."""

        async def ask() -> tuple[list[str], list[bytes]]:
            stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
            call = stub.ServerReflectionInfo(timeout=self.timeout, metadata=self.metadata())
            await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
            listed = await call.read()
            await call.write(reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol))
            files = await call.read()
            await call.done_writing()
            names = [s.name for s in listed.list_services_response.service]
            return names, list(files.file_descriptor_response.file_descriptor_proto)

        return self.run(ask(), what="ServerReflectionInfo")

    # -- sessions

    def session(self, channel: grpc.aio.Channel | None = None) -> Session:
        """Open a Session stream (no handshake sent yet)."""
        s = Session(self, channel or self.channel)
        self.sessions.append(s)
        return s


class Session(RequestBuilder):
    """One Session stream. Requests get increasing ids unless given one."""

    def __init__(self, wire: Wire, channel: grpc.aio.Channel) -> None:
        super().__init__()
        self.wire = wire
        self._queue: asyncio.Queue[pb.SessionResponse | StreamEnd] = asyncio.Queue()
        # When each answer arrived (time.monotonic(), read on the loop's thread), in order: a
        # check measuring latencies reads :attr:`received_at` after recv(), so an answer that
        # waited in the queue while the check read another is timed by its arrival.
        self._arrivals: collections.deque[float] = collections.deque()
        self.received_at = 0.0

        async def start() -> tuple[Any, asyncio.Task[None]]:
            call = channel.stream_stream(
                SESSION_METHOD, request_serializer=_serialize, response_deserializer=pb.SessionResponse.FromString
            )(metadata=wire.metadata(channel))
            reader = asyncio.ensure_future(self._read(call))
            wire._tasks.add(reader)
            reader.add_done_callback(wire._tasks.discard)
            return call, reader

        self.call, self._reader = wire.run(start())

    async def _read(self, call: Any) -> None:
        try:
            while True:
                r = await call.read()
                if r is grpc.aio.EOF:
                    break
                self._arrivals.append(time.monotonic())
                self._queue.put_nowait(r)
            end = StreamEnd(await call.code(), await call.details() or "")
        except grpc.aio.AioRpcError as e:
            end = StreamEnd(e.code(), e.details() or "")
        except asyncio.CancelledError:
            end = StreamEnd(grpc.StatusCode.CANCELLED, "cancelled by the client")
        except Exception as e:  # noqa: BLE001 - e.g. an answer that does not decode
            end = StreamEnd(grpc.StatusCode.UNKNOWN, f"{type(e).__name__}: {e}")
        self._queue.put_nowait(end)

    # -- raw operations

    def send(self, request: pb.SessionRequest | bytes) -> bool:
        """Write one request (or raw bytes); False when the stream no longer accepts writes."""
        try:
            self.wire.run(self.call.write(request), what="a write")
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError, RuntimeError):
            return False
        return True

    def recv(self, timeout: float | None = None) -> pb.SessionResponse | StreamEnd:
        """The next answer, or the :class:`StreamEnd` (sticky) once the stream is over."""
        item = self.wire.run(self._queue.get(), timeout, what="a request on the session")
        if isinstance(item, StreamEnd):
            self.end = item
            self._queue.put_nowait(item)
            self.received_at = time.monotonic()
        else:
            self.received_at = self._arrivals.popleft() if self._arrivals else time.monotonic()
        return item

    def arrived(self) -> int:
        """How many answers have arrived and are not read yet (never blocks)."""
        return len(self._arrivals)

    def half_close(self) -> None:
        """Tell the server no more requests will come."""
        try:
            self.wire.run(self.call.done_writing(), what="half-close")
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
            pass

    def cancel(self) -> None:
        """Drop the stream abruptly (client-side cancellation)."""
        self.call.cancel()
        if self in self.wire.sessions:
            self.wire.sessions.remove(self)

    def wait_end(self, timeout: float | None = None) -> tuple[StreamEnd, list[pb.SessionResponse]]:
        """Read until the stream ends: (its end, the answers read meanwhile)."""
        extra: list[pb.SessionResponse] = []
        t = self.wire.timeout if timeout is None else timeout
        deadline = self.wire.loop.time() + t
        while True:
            left = deadline - self.wire.loop.time()
            if left <= 0:
                raise NoAnswer(f"the stream did not end within {t:g} s")
            item = self.recv(left)
            if isinstance(item, StreamEnd):
                return item, extra
            extra.append(item)

    def shutdown(self, timeout: float = 3.0) -> None:
        """End the session politely (close request, then wait for the end), else cancel."""
        try:
            if self.end is None:
                if self.opened:
                    self.send(self.request(close=pb.CloseRequest()))
                self.half_close()
                self.wait_end(timeout)
        except Violation:
            pass
        finally:
            self.cancel()
