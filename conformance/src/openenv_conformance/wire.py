"""The wire: real gRPC sessions and unary calls to a target, driven synchronously.

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
import dataclasses
import itertools
import threading
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from openenv.client import parse_url
from openenv.codec import to_struct
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import environment_pb2_grpc, error_pb2, tool_pb2
from openenv_conformance.errors import Violation

__all__ = ["SERVICE", "NoAnswer", "Session", "StreamEnd", "Wire", "code_name", "expect_error", "expect_ok"]

SERVICE = "openenv.v1.EnvironmentService"
SESSION_METHOD = f"/{SERVICE}/Session"
PROTOCOL_VERSION = "1.1"

T = TypeVar("T")


class NoAnswer(Violation):
    """The target did not answer within the timeout."""


@dataclasses.dataclass(frozen=True)
class StreamEnd:
    """The end of a Session stream and its gRPC status."""

    code: grpc.StatusCode
    details: str = ""

    def __str__(self) -> str:
        return f"stream ended with gRPC status {self.code.name}" + (f" ({self.details})" if self.details else "")


def code_name(code: int) -> str:
    """``INVALID_ARGUMENT`` for 3; the number itself for codes outside the table."""
    try:
        return error_pb2.ErrorCode.Name(code).removeprefix("ERROR_CODE_")
    except ValueError:
        return f"code {code}"


def describe(resp: pb.SessionResponse | StreamEnd) -> str:
    """A one-line description of an answer, for failure messages."""
    if isinstance(resp, StreamEnd):
        return str(resp)
    kind = resp.WhichOneof("kind")
    if kind == "error":
        e = resp.error
        return f"error {code_name(e.code)}{' (fatal)' if e.fatal else ''}: {e.message}"
    return f"a {kind} answer" if kind else "an answer with no kind set"


def expect_ok(resp: pb.SessionResponse | StreamEnd, kind: str, what: str) -> Any:
    """The ``kind`` part of ``resp``; a :class:`Violation` naming ``what`` otherwise."""
    if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == kind:
        return getattr(resp, kind)
    raise Violation(f"{what}: expected a {kind} answer, got {describe(resp)}")


def expect_error(resp: pb.SessionResponse | StreamEnd, codes: str | tuple[str, ...], what: str,
                 fatal: bool | None = None) -> error_pb2.Status:
    """The error of ``resp``, which must carry one of ``codes`` (names such as
    ``"FAILED_PRECONDITION"``) and, when ``fatal`` is given, that fatality."""
    codes = (codes,) if isinstance(codes, str) else codes
    want = " or ".join(codes)
    if not (isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "error"):
        raise Violation(f"{what}: expected error {want}, got {describe(resp)}")
    e = resp.error
    if code_name(e.code) not in codes:
        raise Violation(f"{what}: expected error {want}, got {describe(resp)}")
    if fatal is not None and e.fatal != fatal:
        raise Violation(f"{what}: error {code_name(e.code)} must {'' if fatal else 'not '}be fatal")
    return e


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

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        scheme, self.address = parse_url(url)
        if scheme != "grpc":
            raise ValueError(f"{url!r}: the wire speaks grpc:// only")
        self.url = url
        self.timeout = timeout
        self.loop = _thread_loop()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._channels: list[grpc.aio.Channel] = []
        self.sessions: list[Session] = []
        self.channel = self.new_channel()
        self.stub = environment_pb2_grpc.EnvironmentServiceStub(self.channel)

    @property
    def features(self) -> frozenset[str]:
        """Everything the checks can express (see :mod:`openenv_conformance.transport`)."""
        from openenv_conformance.transport import EPISODE_FIELDS, GRPC

        return frozenset({GRPC, EPISODE_FIELDS})

    # -- plumbing

    def run(self, aw: Awaitable[T], timeout: float | None = None, what: str = "the call") -> T:
        """Run ``aw`` on the wire's loop, for at most ``timeout`` seconds."""
        t = self.timeout if timeout is None else timeout
        try:
            return self.loop.run_until_complete(asyncio.wait_for(aw, t))
        except TimeoutError:
            raise NoAnswer(f"no answer to {what} within {t:g} s") from None

    def new_channel(self) -> grpc.aio.Channel:
        """A new connection to the target (its own HTTP/2 connection)."""
        async def make() -> grpc.aio.Channel:
            return grpc.aio.insecure_channel(self.address, options=[
                ("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", -1),
                ("grpc.enable_retries", 0),
                ("grpc.use_local_subchannel_pool", 1),
            ])

        ch = self.run(make())
        self._channels.append(ch)
        return ch

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
            return await self.stub.GetInfo(pb.GetInfoRequest(), timeout=t)

        return self.run(call(), t + 1, "GetInfo").info

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
            call = stub.ServerReflectionInfo(timeout=self.timeout)
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


class RequestBuilder:
    """The protocol's requests, built once for every transport's session: a subclass
    provides ``request(**kind)`` (a SessionRequest with the next id) and ``exchange``."""

    def request(self, request_id: int | None = None, **kind: Any) -> pb.SessionRequest:
        raise NotImplementedError

    def exchange(self, request: pb.SessionRequest, timeout: float | None = None) -> pb.SessionResponse | StreamEnd:
        raise NotImplementedError

    def handshake(self, **kw: Any) -> pb.SessionResponse | StreamEnd:
        raise NotImplementedError

    def open(self, **kw: Any) -> pb.HandshakeResponse:
        """Handshake, which must succeed."""
        return expect_ok(self.handshake(**kw), "handshake", "handshake")

    def reset(self, seed: int | None = None, episode_id: str = "",
              options: Mapping[str, Any] | None = None) -> pb.SessionResponse | StreamEnd:
        r = pb.ResetRequest(episode_id=episode_id)
        if seed is not None:
            r.seed = seed
        if options:
            to_struct(dict(options), r.options)
        return self.exchange(self.request(reset=r))

    def step(self, action: Any, timeout_s: float | None = None) -> pb.SessionResponse | StreamEnd:
        """``action`` is a Payload (or anything with a ``payload`` attribute)."""
        payload = getattr(action, "payload", action)
        st = pb.StepRequest(action=payload)
        if timeout_s is not None:
            st.timeout.FromNanoseconds(int(timeout_s * 1e9))
        return self.exchange(self.request(step=st))

    def state(self, env_id: int | None = None) -> pb.SessionResponse | StreamEnd:
        """``env_id`` addresses one instance of a vectorised session."""
        return self.exchange(self.request(state=pb.StateRequest(env_id=env_id or 0)))

    def batch_reset(self, env_ids: Sequence[int] = (), seeds: Sequence[int] = (),
                    options: Mapping[str, Any] | None = None) -> pb.SessionResponse | StreamEnd:
        r = pb.BatchResetRequest(env_ids=list(env_ids), seeds=list(seeds))
        if options:
            to_struct(dict(options), r.options)
        return self.exchange(self.request(batch_reset=r))

    def batch_step(self, env_ids: Sequence[int], actions: Sequence[Any],
                   timeout_s: float | None = None) -> pb.SessionResponse | StreamEnd:
        """``actions``: Payloads (or anything with a ``payload`` attribute), one per id."""
        b = pb.BatchStepRequest(env_ids=list(env_ids), actions=[getattr(a, "payload", a) for a in actions])
        if timeout_s is not None:
            b.timeout.FromNanoseconds(int(timeout_s * 1e9))
        return self.exchange(self.request(batch_step=b))

    def list_tools(self) -> pb.SessionResponse | StreamEnd:
        return self.exchange(self.request(list_tools=tool_pb2.ListToolsRequest()))

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> pb.SessionResponse | StreamEnd:
        c = tool_pb2.CallToolRequest(name=name)
        if arguments:
            to_struct(dict(arguments), c.arguments)
        return self.exchange(self.request(call_tool=c))

    def close(self) -> pb.SessionResponse | StreamEnd:
        return self.exchange(self.request(close=pb.CloseRequest()))


class Session(RequestBuilder):
    """One Session stream. Requests get increasing ids unless given one."""

    def __init__(self, wire: Wire, channel: grpc.aio.Channel) -> None:
        self.wire = wire
        self._ids = itertools.count(1)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.end: StreamEnd | None = None
        self.opened = False  # a handshake was accepted
        self.info: pb.EnvironmentInfo | None = None
        self.session_id = ""

        async def start() -> None:
            self.call = channel.stream_stream(SESSION_METHOD, request_serializer=_serialize,
                                              response_deserializer=pb.SessionResponse.FromString)()
            self._reader = asyncio.ensure_future(self._read())
            wire._tasks.add(self._reader)
            self._reader.add_done_callback(wire._tasks.discard)

        wire.run(start())

    async def _read(self) -> None:
        try:
            while True:
                r = await self.call.read()
                if r is grpc.aio.EOF:
                    break
                self._queue.put_nowait(r)
            end = StreamEnd(await self.call.code(), await self.call.details() or "")
        except grpc.aio.AioRpcError as e:
            end = StreamEnd(e.code(), e.details() or "")
        except asyncio.CancelledError:
            end = StreamEnd(grpc.StatusCode.CANCELLED, "cancelled by the client")
        except Exception as e:  # noqa: BLE001 - e.g. an answer that does not decode
            end = StreamEnd(grpc.StatusCode.UNKNOWN, f"{type(e).__name__}: {e}")
        self._queue.put_nowait(end)

    # -- raw operations

    def next_id(self) -> int:
        return next(self._ids)

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
        return item

    def exchange(self, request: pb.SessionRequest, timeout: float | None = None) -> pb.SessionResponse | StreamEnd:
        """Send ``request`` and read one answer (or the end of the stream)."""
        if not self.send(request):
            return self.recv(timeout) if self.end is None else self.end
        return self.recv(timeout)

    def request(self, request_id: int | None = None, **kind: Any) -> pb.SessionRequest:
        """Build a request with the next id (or ``request_id``)."""
        return pb.SessionRequest(request_id=self.next_id() if request_id is None else request_id, **kind)

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

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # -- requests

    def handshake(self, protocol_version: str = PROTOCOL_VERSION, *, options: Mapping[str, Any] | None = None,
                  client_name: str = "openenv-certify", request_id: int | None = None, num_envs: int = 0,
                  autoreset_mode: int = 0) -> pb.SessionResponse | StreamEnd:
        """``num_envs > 1`` opens a vectorised session (``autoreset_mode``: an
        ``openenv.v1.AutoresetMode``)."""
        hs = pb.HandshakeRequest(protocol_version=protocol_version, client_name=client_name, num_envs=num_envs,
                                 autoreset_mode=autoreset_mode)
        if options:
            to_struct(dict(options), hs.options)
        resp = self.exchange(self.request(request_id, handshake=hs))
        if isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") == "handshake":
            self.opened = True
            self.info = resp.handshake.info
            self.session_id = resp.handshake.session_id
        return resp

