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

Why picows: its framing and parsing are Cython, and it costs a fraction of the CPU per message
of any other Python WebSocket client measured (docs/performance.md, "Binary WebSocket"). It is
in the ``http`` extra; when it cannot be imported the ``websockets`` library (OpenEnv's JSON
transport's client) carries the same stream, with the same guarantees (:data:`BACKEND` says
which). Needs the ``http`` extra.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc

from openenv.client.grpc import END_GRACE_S, GrpcConnection
from openenv.client.options import ConnectionOptions
from openenv.client.urls import BINARY_SUBPROTOCOL, is_loopback
from openenv.errors import EnvError, FailedPrecondition, PermissionDenied, Unauthenticated, Unimplemented
from openenv.security import client_ssl_context
from openenv.v1 import environment_pb2

__all__ = ["BACKEND", "BinaryWsConnection", "close_status"]

try:  # the http extra's; when absent, websockets carries the stream (see the module docstring)
    import picows
except ImportError:  # pragma: no cover - the http extra installs it
    picows = None  # type: ignore[assignment]

BACKEND = "picows" if picows is not None else "websockets"
"""The WebSocket library this client speaks with: ``picows`` (the http extra's), else ``websockets``."""

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
    """The fatal error of a refused upgrade (``e``: websockets' InvalidHandshake or picows'
    WSHandshakeError)."""
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    status = int(status) if status is not None else None
    body = getattr(e, "raw_body", None) or getattr(response, "body", None) or b""
    detail = ""
    with contextlib.suppress(Exception):
        detail = str(json.loads(bytes(body)).get("detail", ""))
    suffix = f": {detail}" if detail else ""
    if status == 401:
        return Unauthenticated(f"the server refused the connection (401){suffix}", fatal=True)
    if status == 403:
        return PermissionDenied(f"the server refused the connection (403){suffix}", fatal=True)
    if status in (400, 404, 426):
        return Unimplemented(f"{url} does not serve the binary session transport ({status}){suffix}", fatal=True)
    return Unimplemented(f"cannot open a binary session WebSocket to {url}: {type(e).__name__}: {e}", fatal=True)


def _response_of(data: Any, cancel: Callable[[], Any]) -> environment_pb2.SessionResponse:
    """The answer in one message, on either library; a text or undecodable message is a broken
    server: the call is cancelled and the stream ends INTERNAL."""
    if isinstance(data, str):
        cancel()
        raise _rpc_error(grpc.StatusCode.INTERNAL, "the server sent a text message on the binary transport")
    try:
        return environment_pb2.SessionResponse.FromString(data)
    except Exception as e:  # noqa: BLE001 - a broken server: the stream cannot go on
        cancel()
        raise _rpc_error(grpc.StatusCode.INTERNAL, f"undecodable SessionResponse ({type(e).__name__})") from None


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
        return _response_of(data, self.cancel)

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


def _proxy_for(url: str) -> str | None:
    """The proxy for ``url`` from the environment (``http(s)_proxy``, ``no_proxy``), as the
    websockets client picks it; None for loopback and bypassed hosts."""
    if is_loopback(url):
        return None
    host = urllib.parse.urlsplit(url).hostname or ""
    if urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get("https" if url.startswith("wss:") else "http") or None


class _Listener(picows.WSListener if picows is not None else object):  # type: ignore[misc]
    """The client's end of one picows WebSocket: whole messages (reassembled, bounded by the
    client's limit) queued for :class:`_PicowsCall`, and how the socket ended."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inbox: collections.deque[bytes | str] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.eof = False
        self.transport: Any = None
        self.received: tuple[int | None, str] | None = None  # the server's close (code, reason)
        self.sent_1009 = False  # we closed with 1009: an answer over our limit
        self._parts: list[bytes] | None = None
        self._text = False
        self._size = 0

    def on_ws_connected(self, transport: Any) -> None:
        self.transport = transport
        # picows keeps a protocol error (a frame over our limit) for wait_disconnected() to
        # raise; awaited here, so that it is retrieved, not reported to the loop as unhandled.
        watch = asyncio.get_running_loop().create_task(transport.wait_disconnected())
        watch.add_done_callback(_retrieve)

    def on_ws_frame(self, transport: Any, frame: Any) -> None:
        kind = frame.msg_type
        if kind is _BINARY and frame.fin and self._parts is None:  # the hot path
            self._push(frame.get_payload_as_bytes())
        elif kind is _BINARY or kind is _TEXT:
            self._parts, self._text, self._size = [], kind is _TEXT, 0
            self._fragment(frame)
        elif kind is _CONT and self._parts is not None:
            self._fragment(frame)
        elif kind is _CLOSE:
            # Read from the payload: picows' enum of close codes has no 4000+code member.
            payload = frame.get_payload_as_bytes()
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
            self.received = (code, payload[2:].decode(errors="replace"))
            if not transport.is_close_frame_sent:
                transport.send_close(code or 1000)
            transport.disconnect()

    def _fragment(self, frame: Any) -> None:
        assert self._parts is not None
        self._size += frame.payload_size
        if self._size > self.limit:
            self._parts = None
            self.sent_1009 = True
            self.transport.send_close(1009)
            self.transport.disconnect()
            return
        self._parts.append(frame.get_payload_as_bytes())
        if frame.fin:
            data, self._parts = b"".join(self._parts), None
            self._push(data.decode(errors="replace") if self._text else data)

    def _push(self, data: bytes | str) -> None:
        self.inbox.append(data)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_ws_disconnected(self, transport: Any) -> None:
        self.eof = True
        hs = transport.close_handshake
        if hs is not None and hs.sent is not None and hs.recv is None and int(hs.sent.code) == 1009:
            self.sent_1009 = True  # picows refused a frame over max_frame_size
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


if picows is not None:
    _BINARY, _TEXT = picows.WSMsgType.BINARY, picows.WSMsgType.TEXT
    _CONT, _CLOSE = picows.WSMsgType.CONTINUATION, picows.WSMsgType.CLOSE


class _PicowsChannel:
    """One picows WebSocket (the connection of one stream), with grpc.aio's channel operations."""

    def __init__(self, url: str, kw: dict[str, Any], limit: int) -> None:
        self.url, self.kw, self.limit = url, kw, limit
        self.ws: _Listener | None = None
        self.failure = ""  # why ready() returned False, when an error said so

    async def ready(self, timeout: float) -> bool:
        """Connect; False when the server cannot be reached in time, raises the fatal error of
        a refused upgrade (token, Origin, no such transport)."""
        assert picows is not None
        try:
            transport, listener = await asyncio.wait_for(
                picows.ws_connect(
                    lambda: _Listener(self.limit),
                    self.url,
                    websocket_handshake_timeout=timeout,
                    max_frame_size=self.limit,
                    max_redirects=0,
                    logger_name="openenv.client.binary",
                    **self.kw,
                ),
                timeout,
            )
        except picows.WSHandshakeError as e:
            if getattr(e, "response", None) is None:
                self.failure = f"{type(e).__name__}: {e}"
                return False  # no HTTP answer in time (or a broken one): not reachable
            raise _refusal(e, self.url) from None
        except (OSError, TimeoutError) as e:
            self.failure = f"{type(e).__name__}: {e}"
            return False
        self.ws = listener  # type: ignore[assignment]  # ours: made by the factory above
        if transport.response is None:  # the server closed before answering (seen under a 16k burst)
            self.failure = "the server closed the connection before answering the upgrade"
            await self.close()
            return False
        if transport.response.headers.get("Sec-WebSocket-Protocol") != BINARY_SUBPROTOCOL:
            await self.close()
            raise Unimplemented(f"{self.url} did not select the subprotocol {BINARY_SUBPROTOCOL}", fatal=True)
        return True

    async def close(self) -> None:
        ws, self.ws = self.ws, None
        if ws is None or ws.transport is None:
            return
        transport = ws.transport
        if not transport.is_disconnected:
            with contextlib.suppress(Exception):
                if not transport.is_close_frame_sent:
                    transport.send_close(1000)
                # Wait for the server's close (the close handshake), bounded: then the socket.
                await asyncio.wait_for(transport.wait_disconnected(), END_GRACE_S)
        if not transport.is_disconnected:
            transport.underlying_transport.abort()


class _PicowsCall:
    """The ``Session`` stream on one picows WebSocket, seen through grpc.aio's ``StreamStreamCall``."""

    __slots__ = ("_code", "_details", "_ws")

    def __init__(self, channel: _PicowsChannel) -> None:
        assert channel.ws is not None
        self._ws = channel.ws
        self._code: grpc.StatusCode | None = None
        self._details = ""

    def _ended(self) -> grpc.StatusCode:
        """Record how the socket ended."""
        if self._code is None:
            ws = self._ws
            if ws.sent_1009:  # our own limit: the server's answer was too large
                self._code, self._details = close_status(1009, "the answer exceeds this client's limit")
            elif ws.received is not None:
                self._code, self._details = close_status(*ws.received)
            else:
                self._code, self._details = close_status(None, "")
        return self._code

    async def write(self, message: environment_pb2.SessionRequest) -> None:
        if self._code is not None and self._code is not grpc.StatusCode.OK:
            raise _rpc_error(self._code, self._details)
        transport = self._ws.transport
        if self._ws.eof or transport.is_disconnected or transport.is_close_frame_sent:
            raise _rpc_error(self._ended(), self._details or "the WebSocket is closed")
        transport.send(_BINARY, message.SerializeToString())

    async def read(self) -> Any:
        ws = self._ws
        inbox = ws.inbox
        while not inbox:
            if ws.eof:
                if self._ended() is grpc.StatusCode.OK:
                    return grpc.aio.EOF
                raise _rpc_error(self._code or grpc.StatusCode.UNAVAILABLE, self._details)
            ws.waiter = asyncio.get_running_loop().create_future()
            await ws.waiter
        data = inbox.popleft()
        return _response_of(data, self.cancel)

    async def done_writing(self) -> None:
        """Half-close: the transport's empty message (the server answers what it was sent,
        then ends the stream with close 1000)."""
        transport = self._ws.transport
        if not transport.is_disconnected and not transport.is_close_frame_sent:
            transport.send(_BINARY, b"")

    def done(self) -> bool:
        return self._code is not None or self._ws.eof

    def cancel(self) -> bool:
        if self._code is None:
            self._code, self._details = grpc.StatusCode.CANCELLED, "Locally cancelled by application!"
        transport = self._ws.transport
        if not transport.is_disconnected:
            transport.underlying_transport.abort()  # as a crashed client: no close frame
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
        if picows is not None:
            return self._new_picows_channel()
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

    def _new_picows_channel(self) -> _PicowsChannel:
        headers = [("Sec-WebSocket-Protocol", BINARY_SUBPROTOCOL)]
        headers += list(self._metadata(trace=True) or ())  # the bearer token and the caller's trace context
        kw: dict[str, Any] = {"extra_headers": headers, "proxy": _proxy_for(self.url)}
        if self.keepalive_s:
            kw.update(
                enable_auto_ping=True,
                auto_ping_idle_timeout=self.keepalive_s,
                auto_ping_reply_timeout=self.options.keepalive_timeout_s,
            )
        if self.secure and (self.ca_file or self.client_cert):
            cert, key = self.client_cert or (None, None)
            kw["ssl_context"] = client_ssl_context(self.ca_file, cert, key)
        return _PicowsChannel(self.url, kw, self._limit)

    async def _channel_ready(self, channel: Any, timeout: float) -> bool:
        return await channel.ready(timeout)  # type: ignore[no-any-return]

    def _not_ready_reason(self, channel: Any) -> str:
        failure = getattr(channel, "failure", "")
        return f" ({failure})" if failure else ""

    def _open_call(self, channel: Any, metadata: Any) -> Any:
        if channel.ws is None:
            raise FailedPrecondition("the WebSocket is not connected")
        return _PicowsCall(channel) if isinstance(channel, _PicowsChannel) else _Call(channel)
