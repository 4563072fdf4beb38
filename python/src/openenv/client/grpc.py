"""The protocol's native transport: one gRPC ``Session`` stream per session (grpc.aio).

:class:`GrpcConnection` is a :class:`~openenv.client.session.ClientSession` (request ids,
pipelining and coalescing (RFC 0009), client-side timeouts that never shift answers,
resumption (RFC 0006), closing) over channels of this module: a :class:`GrpcChannel` is one
grpc.aio ``Session`` call, and only here are grpc's status codes turned into the protocol's
errors (:func:`stream_end_error`). Closing ends the stream the way the protocol does (close
request, half-close, read to the end) so that every gRPC operation completes on this event loop
before ``close`` returns: a loop closed right after (``asyncio.run`` per episode) is owed
nothing (see python/tests/test_event_loops.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc

from openenv.client.channel import Unreachable
from openenv.client.options import DEFAULT_MAX_MESSAGE_BYTES, ConnectionOptions
from openenv.client.session import END_GRACE_S, ClientSession
from openenv.errors import EnvError, Unavailable
from openenv.observability import tracing
from openenv.security import grpc_channel_credentials
from openenv.v1 import environment_pb2, environment_pb2_grpc

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "GrpcChannel",
    "GrpcConnection",
    "GrpcDialer",
    "channel_ready",
    "open_channel",
    "stream_end_error",
    "token_metadata",
]


def open_channel(
    target: str,
    *,
    secure: bool = False,
    ca_file: str | None = None,
    options: list[tuple[str, Any]] | None = None,
    client_cert: tuple[str, str] | None = None,
) -> grpc.aio.Channel:
    """A grpc.aio channel to ``host:port``; ``secure``: TLS, verifying the server against
    ``ca_file`` (default: gRPC's bundled roots) and presenting ``client_cert`` (certificate
    and key files) to a server that requires one (mutual TLS)."""
    if secure:
        cert, key = client_cert or (None, None)
        return grpc.aio.secure_channel(target, grpc_channel_credentials(ca_file, cert, key), options=options)
    return grpc.aio.insecure_channel(target, options=options)


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The call metadata carrying ``token`` (RFC 0003), or None without one."""
    return (("authorization", f"Bearer {token}"),) if token else None


# What grpc's client reports, in place of the server's status, when a call ends while one
# of its own writes is still in flight (the write fails; the status that ended the call is
# lost). The server did end the stream, so the session is gone for the same reason a
# dropped connection loses it: UNAVAILABLE, not a server bug.
_CORE_WRITE_FAILURE = "Internal error from Core"


def stream_end_error(code: grpc.StatusCode, details: str | None) -> EnvError:
    """The fatal error for a Session stream that ended with ``code`` (not OK)."""
    if code is grpc.StatusCode.INTERNAL and details == _CORE_WRITE_FAILURE:
        return Unavailable("the stream ended while a request was being sent (its status was lost)", fatal=True)
    return EnvError.from_code(code.value[0], details or code.name, fatal=True)


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


def _metadata(token: str | None, *, trace: bool) -> tuple[tuple[str, str], ...] | None:
    """A stream's metadata: the bearer token (RFC 0003) and, with ``trace``, the caller's trace context."""
    pairs = list(token_metadata(token) or ())
    if trace:
        pairs += tracing.inject()
    return tuple(pairs) or None


class GrpcChannel:
    """One grpc.aio ``Session`` call on a channel; a :class:`~openenv.client.channel.Channel`.
    ``owned``: the grpc.aio channel is this stream's own (closed with it), not a shared one."""

    __slots__ = ("_call", "_channel", "_owned")

    def __init__(self, channel: grpc.aio.Channel, call: Any, *, owned: bool) -> None:
        self._channel, self._call, self._owned = channel, call, owned

    async def send(self, request: environment_pb2.SessionRequest) -> None:
        try:
            await self._call.write(request)
        except grpc.aio.AioRpcError as e:
            raise stream_end_error(e.code(), e.details()) from None
        except asyncio.InvalidStateError:  # the call is over (grpc.aio's own state check)
            raise Unavailable("the stream is over", fatal=True) from None

    async def receive(self) -> environment_pb2.SessionResponse | None:
        call = self._call
        try:
            resp = await call.read()
            if resp is grpc.aio.EOF:
                code = await call.code()
                if code is grpc.StatusCode.OK:
                    return None
                raise stream_end_error(code, await call.details())
        except grpc.aio.AioRpcError as e:
            raise stream_end_error(e.code(), e.details()) from None
        return resp  # type: ignore[no-any-return]

    async def end(self) -> None:
        with contextlib.suppress(Exception):  # the stream may already be over
            await self._call.done_writing()

    async def close(self) -> None:
        self._call.cancel()  # a no-op once the stream is over
        if self._owned:
            await self._channel.close()


class GrpcDialer:
    """Opens :class:`GrpcChannel` streams to ``target`` with ``options`` (see :class:`GrpcConnection`)."""

    resumable = True
    coalesces = True
    answers_carry_ids = True

    def __init__(
        self,
        target: str,
        options: ConnectionOptions,
        url: str,
        *,
        secure: bool = False,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        self.target, self.options, self.url, self.secure = target, options, url, secure
        self.info_key = url
        self.shared = channel

    def channel_options(self) -> list[tuple[str, Any]]:
        """grpc.aio's channel arguments for the options (message limits, keepalive)."""
        limit = self.options.max_message_bytes
        out: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
        ]
        keepalive = self.options.keepalive_s
        if keepalive:  # 0: no keepalive pings (gRPC's default)
            out += [
                ("grpc.keepalive_time_ms", int(keepalive * 1000)),
                ("grpc.keepalive_timeout_ms", int(self.options.keepalive_timeout_s * 1000)),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
            ]
        return out

    async def dial(self, handshake: environment_pb2.HandshakeRequest, timeout: float, *, first: bool) -> GrpcChannel:
        # The first stream goes on the shared channel when there is one (a fleet's: one HTTP/2
        # connection per server, not ours to close); a resume's on a channel of its own.
        channel = self.shared if first else None
        owned = channel is None
        if channel is None:
            o = self.options
            channel = open_channel(
                self.target,
                secure=self.secure,
                ca_file=o.ca_file,
                options=self.channel_options(),
                client_cert=o.client_cert,
            )
            if not await channel_ready(channel, timeout):
                raise Unreachable()
        # The caller's trace context (W3C traceparent, with the otel extra) travels in the first
        # stream's metadata beside the token: the server's request spans join the caller's trace.
        metadata = _metadata(self.options.token, trace=first)
        call = environment_pb2_grpc.EnvironmentServiceStub(channel).Session(metadata=metadata)
        return GrpcChannel(channel, call, owned=owned)


class GrpcConnection(ClientSession):
    """One ``EnvironmentService.Session`` stream; a :class:`~openenv.client.Connection`."""

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
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        """``options``: the connection's settings (:class:`~openenv.client.ConnectionOptions`);
        the keywords ``max_message_bytes``, ``keepalive_s``, ``token``, ``ca_file`` and
        ``client_cert`` replace its fields when given. ``token``: the bearer token sent with
        every stream (RFC 0003); ``secure``: TLS, verifying the server against ``ca_file`` and
        presenting ``client_cert`` (mutual TLS).
        ``channel``: an open channel to ``target`` to multiplex this session's stream on
        (one HTTP/2 connection for many sessions, as :class:`openenv.fleet.FleetClient` does);
        its owner closes it, and chose its security (``secure``, ``ca_file`` and ``client_cert``
        then only apply to the channels a resume opens when the shared one is gone). Without it
        the connection opens and closes a channel of its own."""
        opts = (options or ConnectionOptions()).merged(
            max_message_bytes=max_message_bytes,
            keepalive_s=keepalive_s,
            token=token,
            ca_file=ca_file,
            client_cert=client_cert,
        )
        url = url or f"{'grpcs' if secure else 'grpc'}://{target}"
        super().__init__(GrpcDialer(target, opts, url, secure=secure, channel=channel), opts)
        self.target = target
        self.secure = secure

    def sibling(self) -> GrpcConnection:
        """A new, unopened connection to the same server with the same settings, on a channel
        of its own (how :meth:`openenv.EnvClient.fork` reaches its forks)."""
        return GrpcConnection(self.target, options=self.options, url=self.url, secure=self.secure)
