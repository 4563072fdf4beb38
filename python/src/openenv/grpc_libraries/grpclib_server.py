"""The gRPC listener on grpclib (pure-Python HTTP/2 on asyncio): ``openenv serve --engine grpclib``.

The same wire protocol and the same protocol engine (:class:`openenv.engine.Engine`) as
:class:`openenv.server.Server` (grpc.aio, the reference listener): ``EnvironmentService``
(``Session``, ``GetInfo``, ``GetLoad``), ``grpc.health.v1.Health`` and server reflection;
the same bearer tokens (RFC 0003), message limit, in-band answers to undecodable requests,
bounded replies, handshake deadline, TLS and observation (metrics, access logs, traces).
What differs is the machinery under the engine:
grpclib runs HTTP/2 on the event loop itself, so a message costs no hop through grpc's
completion-queue thread (docs/performance.md measures both engines side by side).

What users may rely on: any gRPC client (grpcio, grpc-js, grpclib) speaks to it as to the
reference engine; ``openenv certify`` checks it with the same suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha._async import ReflectionServicer
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol
from grpclib.server import Server as H2Server
from grpclib.server import Stream as _Stream
from h2.settings import SettingCodes

from openenv.client.grpclib import RawCodec, recv_bounded
from openenv.engine import Incoming, bounded_serializer, tolerant_parse
from openenv.errors import ErrorCode
from openenv.observability.grpc import ObservingInterceptor, observe_context
from openenv.security.grpc_guard import HEALTH_PREFIX
from openenv.server import SERVICE_NAME, Server, max_streams
from openenv.v1 import environment_pb2

__all__ = ["GrpclibServer"]

Stream = _Stream[bytes, bytes]  # a call of the listener: messages travel as bytes (RawCodec)

log = logging.getLogger("openenv.server")

_HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
_REFLECTION_SERVICE = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].full_name
FIRST_REQUEST_WAIT = 5.0
"""How long a refused client-streaming call waits for its first request before it is ended anyway."""


class _Context:
    """A grpclib ``Session`` call as the engine's :class:`~openenv.engine.Stream` (and, for the
    observing wrapper, a context with grpc.aio's ``invocation_metadata``)."""

    encode_result = None  # the engine encodes results as protobuf
    relayed = False  # a client's own stream (not relayed by a sibling worker)

    def __init__(self, stream: Stream, limit: int, serialize: Callable[[Any], bytes]) -> None:
        self._stream = stream
        self._limit = limit
        self._serialize = serialize
        request = environment_pb2.SessionRequest
        self._parse = tolerant_parse(request.FromString, request.DESCRIPTOR)  # RFC 0003: in band, never fatal

    async def read(self) -> Incoming:
        data = await recv_bounded(self._stream._stream, self._limit)
        return None if data is None else self._parse(data)

    async def write(self, resp: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        await self._stream.send_message(self._serialize(resp))

    async def abort(self, code: ErrorCode | grpc.StatusCode, details: str = "") -> NoReturn:
        number = code.value[0] if isinstance(code, grpc.StatusCode) else int(code)
        raise GRPCError(Status(number), details)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return _metadata_pairs(self._stream)

    invocation_metadata = metadata  # grpc.aio's name (observe_context reads it)

    def peer(self) -> str:
        """The client's address in grpc.aio's form (``ipv4:HOST:PORT``, ``ipv6:[HOST]:PORT``)."""
        addr = self._stream.peer.addr() if self._stream.peer is not None else None
        if not addr:
            return ""
        host, port = str(addr[0]), addr[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


class _Listener(H2Server):
    """grpclib's server, advertising as many concurrent streams per connection as there are
    session slots (+16 for unary calls), as the grpc.aio listener does: h2's default (100)
    would stall the handshakes of a client that multiplexes more sessions on one connection."""

    def __init__(self, *args: Any, max_streams: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_streams = max_streams

    def _protocol_factory(self) -> H2Protocol:
        protocol = super()._protocol_factory()
        made, max_streams = protocol.connection_made, self._max_streams

        def connection_made(transport: Any) -> None:
            made(transport)
            protocol.connection._connection.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: max_streams})
            protocol.connection.flush()

        protocol.connection_made = connection_made  # type: ignore[method-assign]
        return protocol


def _metadata_pairs(stream: Stream) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in (stream.metadata or {}).items() if isinstance(v, str))


class GrpclibServer(Server):
    """:class:`openenv.server.Server` served by grpclib instead of grpc.aio (see the module
    docstring). Same constructor, same ``start``/``stop``/``set_serving``/``wait``; of the
    ``interceptors``, it takes the observing one (:class:`~openenv.observability.grpc.ObservingInterceptor`,
    which :class:`openenv.Host` adds) and refuses others, which are grpc.aio's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._observing: list[ObservingInterceptor] = []
        for i in self.interceptors:
            if not isinstance(i, ObservingInterceptor):
                raise ValueError(f"the grpclib engine cannot run grpc.aio interceptors ({type(i).__name__})")
            self._observing.append(i)
        self._h2: H2Server | None = None
        self._status: dict[str, int] = {}
        self._status_changed = asyncio.Condition()
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------------ handlers

    def _refusal(self, stream: Stream) -> str | None:
        """Why this call is refused (RFC 0003: a bearer token), or None."""
        auth = stream.metadata.get("authorization") if stream.metadata is not None else None
        return self._engine.refusal(auth if isinstance(auth, str) else None)

    def _guarded(
        self, func: Callable[[Stream], Awaitable[None]], streaming: bool
    ) -> Callable[[Stream], Awaitable[None]]:
        async def handler(stream: Stream) -> None:
            why = self._refusal(stream)
            if why is not None:
                if streaming:
                    # As the grpc.aio guard does: end a client-streaming call only once its first
                    # request arrived, so the client reads this status and not a failed write.
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(
                            recv_bounded(stream._stream, self.runtime.max_message_bytes), FIRST_REQUEST_WAIT
                        )
                raise GRPCError(Status.UNAUTHENTICATED, why)
            await func(stream)

        return handler

    async def _session(self, stream: Stream) -> None:
        limit = self.runtime.max_message_bytes
        context: Any = _Context(stream, limit, self._bounded)
        closers = []
        for obs in self._observing:
            context, close = observe_context(obs, context, _metadata_pairs(stream))
            closers.append(close)
        try:
            await self._engine.serve(context)
        finally:
            for close in closers:
                close()

    async def _unary(self, stream: Stream, answer: Callable[[], Any]) -> None:
        await recv_bounded(stream._stream, self.runtime.max_message_bytes)
        reply = answer()
        if asyncio.iscoroutine(reply):
            reply = await reply
        await stream.send_message(reply.SerializeToString())

    async def _get_info(self, stream: Stream) -> None:
        await self._unary(stream, self._engine.info)

    async def _get_load(self, stream: Stream) -> None:
        await self._unary(stream, self._engine.load_report)

    def _health_status(self, data: bytes | None) -> tuple[str, int | None]:
        try:
            service = health_pb2.HealthCheckRequest.FromString(data or b"").service
        except DecodeError as e:
            raise GRPCError(Status.INVALID_ARGUMENT, f"undecodable HealthCheckRequest ({e})") from None
        return service, self._status.get(service)

    async def _health_check(self, stream: Stream) -> None:
        _, status = self._health_status(await recv_bounded(stream._stream, self.runtime.max_message_bytes))
        if status is None:
            raise GRPCError(Status.NOT_FOUND, "unknown service")
        await stream.send_message(health_pb2.HealthCheckResponse(status=status).SerializeToString())

    async def _health_watch(self, stream: Stream) -> None:
        service, _ = self._health_status(await recv_bounded(stream._stream, self.runtime.max_message_bytes))
        last: int | None = -1
        while True:
            current = self._status.get(service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
            if current != last:
                msg = health_pb2.HealthCheckResponse(status=current)
                await stream.send_message(msg.SerializeToString())
                last = current
            async with self._status_changed:
                await self._status_changed.wait()

    async def _reflection(self, stream: Stream) -> None:
        limit = self.runtime.max_message_bytes

        async def requests() -> Any:
            while (data := await recv_bounded(stream._stream, limit)) is not None:
                try:
                    yield reflection_pb2.ServerReflectionRequest.FromString(data)
                except DecodeError as e:
                    raise GRPCError(Status.INVALID_ARGUMENT, f"undecodable ServerReflectionRequest ({e})") from None

        async for resp in self._reflector.ServerReflectionInfo(requests(), None):
            await stream.send_message(resp.SerializeToString())

    def __mapping__(self) -> dict[str, Handler]:
        """grpclib's handler table (it calls this on every servicer it is given)."""
        svc = f"/{SERVICE_NAME}/"
        mapping = {
            f"{svc}Session": (self._session, Cardinality.STREAM_STREAM),
            f"{svc}GetInfo": (self._get_info, Cardinality.UNARY_UNARY),
            f"{svc}GetLoad": (self._get_load, Cardinality.UNARY_UNARY),
            f"{HEALTH_PREFIX}Check": (self._health_check, Cardinality.UNARY_UNARY),
            f"{HEALTH_PREFIX}Watch": (self._health_watch, Cardinality.UNARY_STREAM),
        }
        if self.reflection:
            mapping[f"/{_REFLECTION_SERVICE}/ServerReflectionInfo"] = (self._reflection, Cardinality.STREAM_STREAM)
        return {
            path: Handler(
                func if path.startswith(HEALTH_PREFIX) else self._guarded(func, card.client_streaming),
                card,
                bytes,
                bytes,
            )
            for path, (func, card) in mapping.items()
        }

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> GrpclibServer:
        from grpclib.config import Configuration

        self._bounded = bounded_serializer(self.runtime.max_message_bytes)
        self._engine = self.engine
        self._reflector = ReflectionServicer(
            [SERVICE_NAME, _HEALTH_SERVICE, _REFLECTION_SERVICE] if self.reflection else []
        )
        config = Configuration(
            # As the grpc.aio listener: the server's own pings find dead peers; clients may ping.
            _keepalive_time=60.0,
            _keepalive_timeout=20.0,
            _keepalive_permit_without_calls=True,
            _http2_max_pings_without_data=0,
        )
        server = _Listener([self], codec=RawCodec(), config=config, max_streams=max_streams(self.runtime.max_sessions))
        ssl = None
        if self.tls is not None:
            ssl = self.tls.server_ssl_context()
            ssl.set_alpn_protocols(["h2"])
        try:
            await server.start(self.host, self.requested_port, ssl=ssl, reuse_port=self.reuse_port)
        except OSError as e:
            raise RuntimeError(f"cannot bind {self.host}:{self.requested_port}: {e}") from None
        sockets = server._server.sockets if server._server is not None else []  # type: ignore[attr-defined]
        self.port = sockets[0].getsockname()[1] if sockets else None
        self._h2 = server
        await self.set_serving(True)
        if self._owns_manager:
            self.manager.start_reaper()
        log.info("serving %s on %s (engine grpclib)", self.runtime.env_cls.__name__, self.address)
        return self

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            self._status[name] = status
        async with self._status_changed:
            self._status_changed.notify_all()

    async def stop(self, grace_s: float = 10.0) -> None:
        if self._h2 is None:
            return
        await self.set_serving(False)
        if self._owns_manager:
            await self.manager.drain(grace_s)
        server, self._h2 = self._h2, None
        server.close()  # stop listening, GOAWAY to every connection
        try:
            await asyncio.wait_for(server.wait_closed(), min(grace_s, 1.0) + 1.0)
        except TimeoutError:
            log.warning("grpclib listener: connections still open after the grace period")
        if self._owns_manager:
            await self.manager.shutdown()
        self._stopped.set()

    async def wait(self) -> None:
        if self._h2 is not None:
            await self._stopped.wait()
