"""The protocol's binary WebSocket transport as a client connection (RFC 0011).

``EnvClient("ws://host:8000/v1/session")`` (also ``wss://``, and ``http(s)://`` URLs whose
path ends in ``/v1/session``) speaks the protocol itself over a WebSocket: one
``SessionRequest`` per binary message, one ``SessionResponse`` per answer, subprotocol
``openenv.v1+proto``, on the server's HTTP listener.

:class:`BinaryWsConnection` is :class:`~openenv.client.grpc.GrpcConnection` (the same request
ids, pipelining and coalescing (RFC 0009), client-side timeouts that never shift answers,
resumption of a resumable session after a dropped connection (RFC 0006), and closing) over a
WebSocket instead of a grpc.aio call, as :class:`~openenv.client.grpclib.GrpclibConnection` is
over grpclib: the socket is adapted to the few operations the connection uses (``write``,
``read``, ``done_writing``, ``cancel``, ``code``, ``details``), and how it ends is reported as
grpc.aio reports a stream's status, so the connection's logic is shared, not copied:

* close 1000 after the answer to a close request or a fatal error answer: the end of the stream;
* close ``4000 + code`` (the server ended the stream with a status: handshake deadline, session
  ended by the server, taken over by a resume): that status, with the close reason as message;
* 1009 (a message over a side's limit): ``RESOURCE_EXHAUSTED``; a connection lost without a
  close frame (1006) or going away (1001): ``UNAVAILABLE``, after which a resumable session is
  resumed on a new WebSocket;
* an upgrade refused with 401 / 403: a fatal ``UNAUTHENTICATED`` / ``PERMISSION_DENIED`` with
  the server's reason; a server without the transport (no ``openenv.v1+proto`` selected):
  a fatal ``UNIMPLEMENTED``.

Why the ``websockets`` library: it is the HTTP extra's WebSocket client already (OpenEnv's JSON
transport uses it), its framing is C-accelerated, and it is the faster Python client measured
(docs/performance.md, "Binary WebSocket"). Needs the ``http`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc

from openenv.client.grpc import END_GRACE_S, GrpcConnection
from openenv.client.options import ConnectionOptions
from openenv.client.urls import BINARY_SUBPROTOCOL, is_loopback
from openenv.errors import EnvError, FailedPrecondition, PermissionDenied, Unauthenticated, Unimplemented
from openenv.security import client_ssl_context
from openenv.v1 import environment_pb2

__all__ = ["BinaryWsConnection", "close_status"]

_CLOSE_CODE_BASE = 4000  # the server ended the stream with status N: close code 4000 + N
_GRPC_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def close_status(code: int | None, reason: str) -> tuple[grpc.StatusCode, str]:
    """The status a WebSocket close stands for (see the module docstring)."""
    if code == 1000:
        return grpc.StatusCode.OK, reason
    if code is not None and _CLOSE_CODE_BASE < code < _CLOSE_CODE_BASE + 100:
        status = _GRPC_CODES.get(code - _CLOSE_CODE_BASE, grpc.StatusCode.UNKNOWN)
        return status, reason or status.name
    said = f": {reason}" if reason else ""
    if code == 1009:
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"a message exceeds the size limit (close 1009{said})"
    if code == 1011:
        return grpc.StatusCode.INTERNAL, f"the server failed (close 1011{said})"
    if code == 1008:
        return grpc.StatusCode.PERMISSION_DENIED, reason or "policy violation (close 1008)"
    return grpc.StatusCode.UNAVAILABLE, f"the WebSocket closed ({code if code is not None else 'no close frame'}){said}"


def _refusal(e: Exception, url: str) -> EnvError:
    """The fatal error of a refused upgrade."""
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    detail = ""
    with contextlib.suppress(Exception):
        import json

        detail = str(json.loads(bytes(response.body)).get("detail", ""))  # type: ignore[union-attr]
    suffix = f": {detail}" if detail else ""
    if status == 401:
        return Unauthenticated(f"the server refused the connection (401){suffix}", fatal=True)
    if status == 403:
        return PermissionDenied(f"the server refused the connection (403){suffix}", fatal=True)
    if status in (400, 404, 426):
        return Unimplemented(f"{url} does not serve the binary session transport ({status}){suffix}", fatal=True)
    return Unimplemented(f"cannot open a binary session WebSocket to {url}: {type(e).__name__}: {e}", fatal=True)


class _Channel:
    """One WebSocket (the connection of one stream), with grpc.aio's channel operations."""

    def __init__(self, url: str, kw: dict[str, Any]) -> None:
        self.url, self.kw = url, kw
        self.ws: Any = None

    async def ready(self, timeout: float) -> bool:
        """Connect; False when the server cannot be reached in time, raises the fatal error of
        a refused upgrade (token, Origin, no such transport)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake

        try:
            self.ws = await connect(self.url, open_timeout=timeout, **self.kw)
        except (OSError, TimeoutError):
            return False
        except InvalidHandshake as e:
            raise _refusal(e, self.url) from None
        if self.ws.subprotocol != BINARY_SUBPROTOCOL:
            await self.close()
            raise Unimplemented(f"{self.url} did not select the subprotocol {BINARY_SUBPROTOCOL}", fatal=True)
        return True

    async def close(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), END_GRACE_S)
            if ws.transport is not None and not ws.transport.is_closing():
                ws.transport.abort()


class _Call:
    """The ``Session`` stream on one WebSocket, seen through grpc.aio's ``StreamStreamCall``."""

    __slots__ = ("_code", "_details", "_ws")

    def __init__(self, channel: _Channel) -> None:
        self._ws = channel.ws
        self._code: grpc.StatusCode | None = None
        self._details = ""

    def _closed(self, e: Exception) -> grpc.StatusCode:
        """Record how the socket ended (``e``: websockets' ConnectionClosed)."""
        if self._code is None:
            rcvd, sent = getattr(e, "rcvd", None), getattr(e, "sent", None)
            if sent is not None and sent.code == 1009:  # our own limit: the server's answer was too large
                self._code, self._details = close_status(1009, "the answer exceeds this client's limit")
            elif rcvd is not None:
                self._code, self._details = close_status(rcvd.code, rcvd.reason)
            else:
                self._code, self._details = close_status(None, "")
        return self._code

    async def write(self, message: environment_pb2.SessionRequest) -> None:
        if self._code is not None and self._code is not grpc.StatusCode.OK:
            raise _rpc_error(self._code, self._details)
        try:
            await self._ws.send(message.SerializeToString())
        except Exception as e:  # noqa: BLE001 - raised as grpc.aio would raise it
            code = self._closed(e) if hasattr(e, "rcvd") else grpc.StatusCode.UNAVAILABLE
            raise _rpc_error(code, self._details or f"{type(e).__name__}: {e}") from None

    async def read(self) -> Any:
        from websockets.exceptions import ConnectionClosed

        try:
            data = await self._ws.recv()
        except ConnectionClosed as e:
            if self._closed(e) is grpc.StatusCode.OK:
                return grpc.aio.EOF
            raise _rpc_error(self._code or grpc.StatusCode.UNAVAILABLE, self._details) from None
        if isinstance(data, str):
            self.cancel()
            raise _rpc_error(grpc.StatusCode.INTERNAL, "the server sent a text message on the binary transport")
        try:
            return environment_pb2.SessionResponse.FromString(data)
        except Exception as e:  # noqa: BLE001 - a broken server: the stream cannot go on
            self.cancel()
            raise _rpc_error(grpc.StatusCode.INTERNAL, f"undecodable SessionResponse ({type(e).__name__})") from None

    async def done_writing(self) -> None:
        """Half-close: the transport's empty message (the server answers what it was sent,
        then ends the stream with close 1000)."""
        with contextlib.suppress(Exception):
            await self._ws.send(b"")

    def done(self) -> bool:
        return self._code is not None or self._ws.transport is None or self._ws.transport.is_closing()

    def cancel(self) -> bool:
        if self._code is None:
            self._code, self._details = grpc.StatusCode.CANCELLED, "Locally cancelled by application!"
        transport = self._ws.transport
        if transport is not None and not transport.is_closing():
            transport.abort()  # as a crashed client: no close frame
        return True

    async def code(self) -> grpc.StatusCode:
        return self._code or grpc.StatusCode.OK

    async def details(self) -> str:
        return self._details


class BinaryWsConnection(GrpcConnection):
    """One session over the binary WebSocket transport; a :class:`~openenv.client.Connection`
    (see the module docstring). ``url``: ``ws(s)://host:port[/prefix]/v1/session`` (``http(s)``
    is taken as ``ws(s)``); the other arguments are :class:`GrpcConnection`'s, but ``channel``."""

    def __init__(
        self,
        url: str,
        *,
        options: ConnectionOptions | None = None,
        max_message_bytes: int | None = None,
        keepalive_s: float | None = None,
        token: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        scheme, sep, rest = url.partition("://")
        scheme = {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme.lower())
        ws_url = scheme + sep + rest
        super().__init__(
            rest.split("/", 1)[0],
            options=options,
            max_message_bytes=max_message_bytes,
            keepalive_s=keepalive_s,
            url=ws_url,
            token=token,
            secure=scheme == "wss",
            ca_file=ca_file,
            client_cert=client_cert,
        )

    def sibling(self) -> BinaryWsConnection:
        """A new, unopened connection to the same server with the same settings."""
        return type(self)(self.url, options=self.options)

    def _new_channel(self) -> Any:
        kw: dict[str, Any] = {
            "subprotocols": [BINARY_SUBPROTOCOL],
            "max_size": self._limit,
            "compression": None,  # small messages are cheaper raw; the server does not offer it either
            "ping_interval": self.keepalive_s or None,
            "ping_timeout": self.options.keepalive_timeout_s,
            "close_timeout": END_GRACE_S,
        }
        headers = self._metadata(trace=True)  # the bearer token and the caller's trace context
        if headers:
            kw["additional_headers"] = list(headers)
        if is_loopback(self.url):
            kw["proxy"] = None
        if self.secure and (self.ca_file or self.client_cert):
            cert, key = self.client_cert or (None, None)
            kw["ssl"] = client_ssl_context(self.ca_file, cert, key)
        return _Channel(self.url, kw)

    async def _channel_ready(self, channel: Any, timeout: float) -> bool:
        return await channel.ready(timeout)  # type: ignore[no-any-return]

    def _open_call(self, channel: Any, metadata: Any) -> Any:
        if channel.ws is None:
            raise FailedPrecondition("the WebSocket is not connected")
        return _Call(channel)
