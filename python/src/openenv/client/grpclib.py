"""The gRPC transport on grpclib (pure-Python HTTP/2 on the event loop): ``EnvClient(url, grpc_engine="grpclib")``.

:class:`GrpclibConnection` is a :class:`~openenv.client.session.ClientSession` (the same ids,
pipelining, timeouts, resumption and closing as every transport) over grpclib streams
(:class:`GrpclibChannel`), whose statuses and failures are said with the protocol's errors.
Needs the ``grpclib`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from grpclib.client import Channel
from grpclib.client import Stream as ClientStream
from grpclib.config import Configuration
from grpclib.const import Cardinality, Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError

from openenv.client.channel import Unreachable
from openenv.client.grpc import _metadata
from openenv.client.options import ConnectionOptions
from openenv.client.session import ClientSession
from openenv.errors import EnvError, Unavailable
from openenv.security import client_ssl_context
from openenv.v1 import environment_pb2

__all__ = ["GrpclibChannel", "GrpclibConnection", "GrpclibDialer", "RawCodec", "recv_bounded"]

SESSION_PATH = "/openenv.v1.EnvironmentService/Session"


class RawCodec(CodecBase):
    """Messages travel as bytes: each side encodes and decodes them itself (the client its
    requests and answers; the grpclib server decodes tolerantly and encodes bounded)."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return data


async def recv_bounded(h2_stream: Any, limit: int) -> bytes | None:
    """The next gRPC message's bytes from grpclib's HTTP/2 stream (None at its end), refusing
    one longer than ``limit`` before any of it is buffered: RESOURCE_EXHAUSTED, as grpc's
    message limit does. Shared by the grpclib listener (openenv.grpc_libraries)."""
    head = await h2_stream.recv_data(5)
    if not head:
        return None
    if len(head) != 5:
        raise GRPCError(Status.INTERNAL, "truncated gRPC message header")
    if head[0]:
        raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not accepted")
    size = int.from_bytes(head[1:5], "big")
    if size > limit:
        raise GRPCError(Status.RESOURCE_EXHAUSTED, f"Received message larger than max ({size} vs. {limit})")
    data: bytes = await h2_stream.recv_data(size) if size else b""
    if len(data) != size:
        raise GRPCError(Status.INTERNAL, "truncated gRPC message")
    return data


_CANCELLED = Unavailable("the stream was dropped by this client", fatal=True)


class GrpclibChannel:
    """One ``Session`` stream on a grpclib connection; a :class:`~openenv.client.channel.Channel`.
    The connection is the stream's own (closed with it)."""

    def __init__(self, raw: Channel, metadata: Any, limit: int) -> None:
        self._raw = raw
        self._stream: ClientStream[Any, Any] = raw.request(
            SESSION_PATH, Cardinality.STREAM_STREAM, bytes, bytes, metadata=list(metadata or ())
        )
        self._limit = limit
        self._started: asyncio.Future[None] | None = None
        self._open = False  # the request headers went out: the hot path skips _start
        self._headers_read = False
        self._over = False  # the stream ended (and _why says why: None for its normal end)
        self._why: EnvError | None = None
        self._released = False

    async def _start(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            try:
                await self._stream.__aenter__()
                await self._stream.send_request()
            except BaseException as e:  # noqa: BLE001 - recorded for the other waiters, then raised
                self._started.set_exception(self._failed(e))
                self._started.exception()  # retrieved: raised to this caller and to the others
                raise self._failed(e) from None
            self._started.set_result(None)
            self._open = True
        else:
            await asyncio.shield(self._started)

    def _failed(self, e: BaseException) -> BaseException:
        """``e`` as the protocol's fatal error, recording how the stream ended."""
        if isinstance(e, EnvError):
            return e
        if isinstance(e, GRPCError):
            err: EnvError = EnvError.from_code(e.status.value, e.message or e.status.name, fatal=True)
        elif isinstance(e, StreamTerminatedError | ConnectionError | OSError | ProtocolError):
            err = Unavailable(f"{type(e).__name__}: {e}", fatal=True)
        else:
            return e
        if not self._over:
            self._over, self._why = True, err
        return self._why or err

    async def send(self, request: environment_pb2.SessionRequest) -> None:
        if not self._open:
            await self._start()
        if self._over:
            raise self._why or Unavailable("the stream is over", fatal=True)
        try:
            await self._stream.send_message(request.SerializeToString())
        except Exception as e:  # noqa: BLE001 - said as the protocol's error
            raise self._failed(e) from None

    async def receive(self) -> environment_pb2.SessionResponse | None:
        if not self._open:
            await self._start()
        try:
            if not self._headers_read:
                await self._stream.recv_initial_metadata()
                self._headers_read = True
            data = await recv_bounded(self._stream._stream, self._limit)
            if data is None:
                _end_status(self._stream)
                self._over = True  # _why stays as recorded (None: the normal end)
                self._release()
                return None
            return environment_pb2.SessionResponse.FromString(data)
        except StreamTerminatedError as e:
            self._release()
            raise self._failed(_last_status(self._stream, e)) from None
        except Exception as e:  # noqa: BLE001 - said as the protocol's error
            self._release()
            raise self._failed(e) from None

    async def end(self) -> None:
        with contextlib.suppress(Exception):  # already ended (or never started)
            await self._start()
            await self._stream.end()

    async def close(self) -> None:
        h2 = self._stream._stream
        if not self._over:
            self._over, self._why = True, _CANCELLED
        with contextlib.suppress(Exception):
            if h2 is not None and h2.closable:
                h2.reset_nowait()
        self._release()
        self._raw.close()

    def _release(self) -> None:
        if not self._released and getattr(self._stream, "_release_stream", None) is not None:
            self._released = True
            with contextlib.suppress(Exception):
                self._stream._release_stream()


def _end_status(stream: ClientStream[Any, Any]) -> None:
    """Raise the status of a stream the server ended (its data is all read), if not OK.

    The status came before the end (trailers, or trailers-only headers), so it is read as
    received rather than through grpclib's ``recv_trailing_metadata``, which refuses while this
    side has not half-closed ("Outgoing stream was not ended") and raises the reset when the
    server followed its trailers with RST_STREAM(NO_ERROR). A server may end the stream while
    the client still sends (after answering a close request) and may then reset it to say
    "stop sending" (RFC 9113 section 8.1): both are the stream's normal end, not a failure."""
    h2 = stream._stream
    if h2.trailers is None and "grpc-status" not in dict(h2.headers or ()):
        raise GRPCError(Status.UNKNOWN, "the server ended the stream without a status")
    stream._maybe_raise()


def _last_status(stream: ClientStream[Any, Any], reset: StreamTerminatedError) -> BaseException:
    """Why a stream was reset: the status the server sent before (its trailers), else the reset."""
    try:
        stream._maybe_raise()
    except GRPCError as e:
        return e
    return reset


class GrpclibDialer:
    """Opens :class:`GrpclibChannel` streams to ``target`` (``host:port``) with ``options``."""

    resumable = True
    coalesces = True
    answers_carry_ids = True

    def __init__(self, target: str, options: ConnectionOptions, url: str, *, secure: bool = False) -> None:
        self.target, self.options, self.secure = target, options, secure
        self.url = self.info_key = url

    def _config(self) -> Configuration:
        return Configuration(
            _keepalive_time=self.options.keepalive_s or None,  # 0: no keepalive pings
            _keepalive_timeout=self.options.keepalive_timeout_s,
            _keepalive_permit_without_calls=True,
            _http2_max_pings_without_data=0,
        )

    async def dial(self, handshake: environment_pb2.HandshakeRequest, timeout: float, *, first: bool) -> GrpclibChannel:
        host, _, port = self.target.rpartition(":")
        ssl = None
        if self.secure:
            cert, key = self.options.client_cert or (None, None)
            ssl = client_ssl_context(self.options.ca_file, cert, key)
            ssl.set_alpn_protocols(["h2"])
        raw = Channel(host.strip("[]"), int(port), codec=RawCodec(), ssl=ssl, config=self._config())
        try:
            await asyncio.wait_for(raw.__connect__(), timeout)
        except (OSError, TimeoutError):
            raw.close()
            raise Unreachable() from None
        metadata = _metadata(self.options.token, trace=first)
        return GrpclibChannel(raw, metadata, self.options.max_message_bytes)


class GrpclibConnection(ClientSession):
    """A session of the gRPC transport on grpclib (see the module docstring). Takes the
    arguments of :class:`~openenv.client.grpc.GrpcConnection` but ``channel`` (a shared
    grpc.aio channel cannot carry it)."""

    def __init__(
        self,
        target: str,
        *,
        options: ConnectionOptions | None = None,
        max_message_bytes: int | None = None,
        keepalive_s: float | None = None,
        url: str | None = None,
        token: str | None = None,
        secure: bool = False,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
        channel: object | None = None,
    ) -> None:
        if channel is not None:
            raise ValueError("the grpclib engine opens its own connection: a shared grpc.aio channel cannot carry it")
        opts = (options or ConnectionOptions()).merged(
            max_message_bytes=max_message_bytes,
            keepalive_s=keepalive_s,
            token=token,
            ca_file=ca_file,
            client_cert=client_cert,
        )
        url = url or f"{'grpcs' if secure else 'grpc'}://{target}"
        super().__init__(GrpclibDialer(target, opts, url, secure=secure), opts)
        self.target = target
        self.secure = secure

    def sibling(self) -> GrpclibConnection:
        """A new, unopened connection to the same server with the same settings."""
        return GrpclibConnection(self.target, options=self.options, url=self.url, secure=self.secure)
