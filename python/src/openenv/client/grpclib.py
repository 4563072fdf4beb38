"""The gRPC transport on grpclib (pure-Python HTTP/2 on the event loop): ``EnvClient(url, grpc_engine="grpclib")``.

:class:`GrpclibConnection` is :class:`~openenv.client.grpc.GrpcConnection` (the same ids,
pipelining, timeouts, resumption and closing) over a grpclib stream instead of a grpc.aio
call: the stream is adapted to the few operations the connection uses (``write``, ``read``,
``done_writing``, ``cancel``, ``code``, ``details``), and its failures are reported as grpc.aio
reports them, so the connection's logic is shared, not copied. Needs the ``grpclib`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import grpc
from grpclib.client import Channel
from grpclib.client import Stream as ClientStream
from grpclib.config import Configuration
from grpclib.const import Cardinality, Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError

from openenv.client.grpc import GrpcConnection
from openenv.security import client_ssl_context
from openenv.v1 import environment_pb2

__all__ = ["GrpclibConnection", "RawCodec", "recv_bounded"]

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


def _status(code: int) -> grpc.StatusCode:
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c
    return grpc.StatusCode.UNKNOWN


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class _Channel:
    """A grpclib channel with grpc.aio's ``await close()``."""

    def __init__(self, raw: Channel) -> None:
        self.raw = raw

    async def ready(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.raw.__connect__(), timeout)
        except (OSError, TimeoutError):
            self.raw.close()
            return False
        return True

    async def close(self) -> None:
        self.raw.close()


class _Call:
    """One ``Session`` stream on grpclib, seen through grpc.aio's ``StreamStreamCall`` operations."""

    def __init__(self, channel: _Channel, metadata: Any, limit: int) -> None:
        self._stream: ClientStream[Any, Any] = channel.raw.request(
            SESSION_PATH, Cardinality.STREAM_STREAM, bytes, bytes, metadata=list(metadata or ())
        )
        self._limit = limit
        self._started: asyncio.Future[None] | None = None
        self._open = False  # the request headers went out: the hot path skips _start
        self._headers_read = False
        self._code: grpc.StatusCode | None = None
        self._details = ""
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
        """``e`` as grpc.aio would raise it (an :class:`grpc.aio.AioRpcError`), recording the status."""
        if isinstance(e, grpc.aio.AioRpcError):
            return cast(BaseException, e)
        if isinstance(e, GRPCError):
            code, details = _status(e.status.value), e.message or ""
        elif isinstance(e, StreamTerminatedError | ConnectionError | OSError | ProtocolError):
            code, details = grpc.StatusCode.UNAVAILABLE, f"{type(e).__name__}: {e}"
        else:
            return e
        if self._code is None:
            self._code, self._details = code, details
        return cast(BaseException, _rpc_error(self._code, self._details))

    async def write(self, message: environment_pb2.SessionRequest) -> None:
        if not self._open:
            await self._start()
        if self._code is not None:
            raise _rpc_error(self._code, self._details)
        try:
            await self._stream.send_message(message.SerializeToString())
        except Exception as e:  # noqa: BLE001 - raised as grpc.aio would raise it
            raise self._failed(e) from None

    async def read(self) -> Any:
        if not self._open:
            await self._start()
        try:
            if not self._headers_read:
                await self._stream.recv_initial_metadata()
                self._headers_read = True
            data = await recv_bounded(self._stream._stream, self._limit)
            if data is None:
                await self._stream.recv_trailing_metadata()
                self._code = self._code or grpc.StatusCode.OK
                self._release()
                return grpc.aio.EOF
            return environment_pb2.SessionResponse.FromString(data)
        except StreamTerminatedError as e:
            self._release()
            raise self._failed(_last_status(self._stream, e)) from None
        except Exception as e:  # noqa: BLE001 - raised as grpc.aio would raise it
            self._release()
            raise self._failed(e) from None

    async def done_writing(self) -> None:
        await self._start()
        with contextlib.suppress(ProtocolError):  # already ended
            await self._stream.end()

    def cancel(self) -> bool:
        h2 = self._stream._stream
        if self._code is None:
            self._code, self._details = grpc.StatusCode.CANCELLED, "Locally cancelled by application!"
        with contextlib.suppress(Exception):
            if h2 is not None and h2.closable:
                h2.reset_nowait()
        self._release()
        return True

    def _release(self) -> None:
        if not self._released and getattr(self._stream, "_release_stream", None) is not None:
            self._released = True
            with contextlib.suppress(Exception):
                self._stream._release_stream()

    async def code(self) -> grpc.StatusCode:
        return self._code or grpc.StatusCode.OK

    async def details(self) -> str:
        return self._details


def _last_status(stream: ClientStream[Any, Any], reset: StreamTerminatedError) -> BaseException:
    """Why a stream was reset: the status the server sent before (its trailers), else the reset."""
    try:
        stream._maybe_raise()
    except GRPCError as e:
        return e
    return reset


class GrpclibConnection(GrpcConnection):
    """:class:`~openenv.client.grpc.GrpcConnection` on grpclib (see the module docstring).
    Takes the same arguments but ``channel`` (a shared grpc.aio channel cannot carry it)."""

    def __init__(self, target: str, **kwargs: Any) -> None:
        if kwargs.get("channel") is not None:
            raise ValueError("the grpclib engine opens its own connection: a shared grpc.aio channel cannot carry it")
        super().__init__(target, **kwargs)

    def _config(self) -> Configuration:
        return Configuration(
            _keepalive_time=self.keepalive_s or None,  # 0: no keepalive pings
            _keepalive_timeout=self.options.keepalive_timeout_s,
            _keepalive_permit_without_calls=True,
            _http2_max_pings_without_data=0,
        )

    def _new_channel(self) -> Any:
        host, _, port = self.target.rpartition(":")
        ssl = None
        if self.secure:
            cert, key = self.client_cert or (None, None)
            ssl = client_ssl_context(self.ca_file, cert, key)
            ssl.set_alpn_protocols(["h2"])
        return _Channel(Channel(host.strip("[]"), int(port), codec=RawCodec(), ssl=ssl, config=self._config()))

    async def _channel_ready(self, channel: Any, timeout: float) -> bool:
        return await channel.ready(timeout)  # type: ignore[no-any-return]

    def _open_call(self, channel: Any, metadata: Any) -> Any:
        return _Call(channel, metadata, self._limit)
