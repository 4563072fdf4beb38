"""The protocol's native transport: one gRPC ``Session`` stream per session (grpc.aio).

Requests carry increasing ids; a reader task matches answers to them, so calls may be
pipelined and a client-side timeout never shifts later answers. Closing ends the stream the
way the protocol does (close request, half-close, read to the end) so that every gRPC
operation completes on this event loop before ``close`` returns: a loop closed right after
(``asyncio.run`` per episode) is owed nothing (see python/tests/test_event_loops.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import grpc

from openenv.errors import (
    DeadlineExceeded,
    EnvError,
    FailedPrecondition,
    ResourceExhausted,
    Unavailable,
)
from openenv.v1 import environment_pb2, environment_pb2_grpc

__all__ = ["GrpcConnection", "channel_ready"]

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
END_GRACE_S = 5.0  # how long closing waits for the server to end the stream before cancelling it


async def channel_ready(channel: grpc.aio.Channel, timeout: float) -> bool:
    """Wait until ``channel`` is connected; on timeout close it and return False.

    The pending connectivity watch is not cancelled but resolved by closing the channel,
    and awaited: a watch merely cancelled would complete later, on a loop that may be gone."""
    ready = asyncio.ensure_future(channel.channel_ready())
    try:
        done, _ = await asyncio.wait({ready}, timeout=timeout)
    except BaseException:
        ready.cancel()
        await channel.close()
        raise
    if done:
        ready.result()
        return True
    await channel.close()  # the channel goes to SHUTDOWN, which resolves the watch
    await asyncio.wait({ready}, timeout=END_GRACE_S)
    if ready.done():
        if not ready.cancelled():
            ready.exception()  # retrieved: closing the channel may end the watch with an error
    else:
        ready.cancel()
    return False


class GrpcConnection:
    """One ``EnvironmentService.Session`` stream; a :class:`~openenv.client.Connection`."""

    def __init__(
        self,
        target: str,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        keepalive_s: float = 30.0,
        url: str | None = None,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        """``channel``: an open channel to ``target`` to multiplex this session's stream on
        (one HTTP/2 connection for many sessions, as :class:`openenv.fleet.FleetClient` does);
        its owner closes it. Without it the connection opens and closes a channel of its own."""
        self.target = target
        self.url = url or f"grpc://{target}"
        self.max_message_bytes = self._limit = max_message_bytes
        self.keepalive_s = keepalive_s
        self.session_id = ""
        self.info = environment_pb2.EnvironmentInfo()
        self._channel: grpc.aio.Channel | None = None
        self._shared_channel = channel
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[environment_pb2.SessionResponse]] = {}
        self._next_id = 0
        self._ended: EnvError | None = None
        self._write_lock = asyncio.Lock()
        self._on_end: Callable[[EnvError], None] | None = None
        self._closing = False

    @property
    def ended(self) -> EnvError | None:
        return self._ended

    def on_end(self, callback: Callable[[EnvError], None] | None) -> None:
        self._on_end = callback

    # ------------------------------------------------------------------ lifecycle

    async def open(self, handshake: environment_pb2.HandshakeRequest, timeout: float) -> None:
        opts = [
            ("grpc.max_receive_message_length", self._limit),
            ("grpc.max_send_message_length", self._limit),
            ("grpc.keepalive_time_ms", int(self.keepalive_s * 1000)),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        channel = self._shared_channel
        if channel is None:
            channel = grpc.aio.insecure_channel(self.target, options=opts)
            if not await channel_ready(channel, timeout):
                raise Unavailable(f"cannot connect to {self.url} within {timeout:g} s", fatal=True)
        self._channel = channel
        self._call = environment_pb2_grpc.EnvironmentServiceStub(channel).Session()
        self._reader = asyncio.ensure_future(self._read_loop())
        try:
            resp = await self.request(environment_pb2.SessionRequest(handshake=handshake), timeout)
        except EnvError:
            await self._shutdown(graceful=True)
            raise
        except BaseException:
            await self._shutdown()
            raise
        if resp.WhichOneof("kind") == "error":
            await self._shutdown(graceful=True)  # a refused handshake: the server ends the stream
            err = EnvError.from_proto(resp.error)
            err.fatal = True
            raise err
        self.session_id = resp.handshake.session_id
        self.info = resp.handshake.info
        server_limit = self.info.capabilities.max_message_bytes
        self.max_message_bytes = min(self._limit, server_limit) if server_limit else self._limit

    async def close(self) -> None:
        """Close request, then end the stream gracefully and close the channel."""
        self._closing = True
        if self._call is not None and self._ended is None:
            with contextlib.suppress(EnvError):
                await self.request(environment_pb2.SessionRequest(close=environment_pb2.CloseRequest()), 10.0)
        await self._shutdown(graceful=True)

    async def abort(self) -> None:
        """Cancel the stream without a close request, as a crashed client would."""
        self._closing = True
        await self._shutdown()

    async def _shutdown(self, graceful: bool = False) -> None:
        """End the stream and close the channel. ``graceful``: half-close and let the
        server end the stream (it does on a close request, a fatal error or end of input),
        so that every gRPC operation of the call completes on this loop before returning;
        a call cancelled instead still owes its loop completions. Cancels after a bound."""
        call, reader = self._call, self._reader
        if graceful and call is not None and reader is not None and not reader.done():
            with contextlib.suppress(Exception):  # the stream may already be over
                await asyncio.wait_for(call.done_writing(), END_GRACE_S)
            await asyncio.wait({reader}, timeout=END_GRACE_S)
        if call is not None:
            call.cancel()
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        if self._channel is not None and self._channel is not self._shared_channel:
            await self._channel.close()
        self._call = self._reader = self._channel = None
        if self._ended is None:
            self._ended = FailedPrecondition("the client is closed", fatal=True)

    # ------------------------------------------------------------------ requests

    async def _read_loop(self) -> None:
        err: EnvError | None = None
        try:
            while True:
                resp = await self._call.read()
                if resp is grpc.aio.EOF:
                    break
                fut = self._pending.pop(resp.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
            code = await self._call.code()
            if code is not grpc.StatusCode.OK:
                err = EnvError.from_code(code.value[0], await self._call.details() or code.name, fatal=True)
        except grpc.aio.AioRpcError as e:
            err = EnvError.from_code(e.code().value[0], e.details() or e.code().name, fatal=True)
        except asyncio.CancelledError:
            err = FailedPrecondition("the client is closed", fatal=True)
        finally:
            self._ended = err or FailedPrecondition("the session has ended", fatal=True)
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(self._ended)
            self._pending.clear()
            if not self._closing and self._on_end is not None:
                self._on_end(self._ended)

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        if self._ended is not None:
            raise self._ended
        if self._call is None:
            raise FailedPrecondition("not connected: use `async with` or await connect()")
        size = req.ByteSize()
        if size > self.max_message_bytes:
            raise ResourceExhausted(f"request of {size} bytes exceeds the {self.max_message_bytes}-byte message limit")
        self._next_id += 1
        rid = req.request_id = self._next_id
        fut: asyncio.Future[environment_pb2.SessionResponse] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            async with self._write_lock:
                await self._call.write(req)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
            self._pending.pop(rid, None)
            if fut.done():  # the reader failed it as the stream ended: retrieved here, raised below
                fut.exception()
            else:
                fut.cancel()
            if self._ended is None and self._reader is not None:
                # The server ended the stream and the reader has not read its status yet: that
                # status (e.g. DEADLINE_EXCEEDED of the idle reaper) is the answer, not this write.
                await asyncio.wait({self._reader}, timeout=END_GRACE_S)
            if self._ended is not None:
                raise self._ended from None
            raise Unavailable(f"session stream failed: {e}", fatal=True) from e
        try:
            return await (asyncio.wait_for(fut, timeout) if timeout is not None else fut)
        except TimeoutError:
            self._pending.pop(rid, None)  # its late answer will be matched and discarded
            raise DeadlineExceeded(f"no answer within {timeout:g} s (client-side timeout)") from None
