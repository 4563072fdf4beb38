"""The protocol's binary WebSocket transport as a client connection (RFC 0011).

``EnvClient("ws://host:8000/v1/session")`` (also ``wss://``, and ``http(s)://`` URLs whose
path ends in ``/v1/session``) speaks the protocol itself over a WebSocket: one
``SessionRequest`` per binary message, one ``SessionResponse`` per answer, subprotocol
``openenv.v1+proto``, on the server's HTTP listener.

:class:`BinaryWsConnection` is a :class:`~openenv.client.session.ClientSession` (the same
request ids, pipelining and coalescing (RFC 0009), client-side timeouts that never shift
answers, resumption of a resumable session after a dropped connection (RFC 0006), and closing
as every transport) over channels that are WebSockets (:class:`PicowsChannel`,
:class:`WebsocketsChannel`); how a socket ends is said with the protocol's errors
(:func:`close_error`):

* close 1000 after the answer to a close request or a fatal error answer: the end of the stream;
  an empty binary message from the client is its half-close;
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
from typing import Any

from openenv.client.channel import Unreachable
from openenv.client.options import ConnectionOptions
from openenv.client.session import END_GRACE_S, ClientSession
from openenv.client.urls import BINARY_SUBPROTOCOL, is_loopback
from openenv.errors import (
    EnvError,
    ErrorCode,
    Internal,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from openenv.observability import tracing
from openenv.security import client_ssl_context
from openenv.v1 import environment_pb2

__all__ = ["BACKEND", "BinaryDialer", "BinaryWsConnection", "PicowsChannel", "WebsocketsChannel", "close_error"]

try:  # the http extra's; when absent, websockets carries the stream (see the module docstring)
    import picows
except ImportError:  # pragma: no cover - the http extra installs it
    picows = None  # type: ignore[assignment]

BACKEND = "picows" if picows is not None else "websockets"
"""The WebSocket library this client speaks with: ``picows`` (the http extra's), else ``websockets``."""

_CLOSE_CODE_BASE = 4000  # the server ended the stream with status N: close code 4000 + N
_CODES = frozenset(int(c) for c in ErrorCode)


def close_error(code: int | None, reason: str) -> EnvError | None:
    """What a WebSocket close stands for (see the module docstring): None for the normal end of
    the stream (1000), else the fatal error the session ends with."""
    if code == 1000:
        return None
    if code is not None and _CLOSE_CODE_BASE < code < _CLOSE_CODE_BASE + 100:
        status = code - _CLOSE_CODE_BASE
        name = ErrorCode(status).name if status in _CODES else f"status {status}"
        return EnvError.from_code(status, reason or name, fatal=True)
    said = f": {reason}" if reason else ""
    if code == 1009:
        return ResourceExhausted(f"a message exceeds the size limit (close 1009{said})", fatal=True)
    if code == 1011:
        return Internal(f"the server failed (close 1011{said})", fatal=True)
    if code == 1008:
        return PermissionDenied(reason or "policy violation (close 1008)", fatal=True)
    why = code if code is not None else "no close frame"
    return Unavailable(f"the WebSocket closed ({why}){said}", fatal=True)


_OVER_OUR_LIMIT = "the answer exceeds this client's limit"


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


def _decode(data: bytes | str) -> environment_pb2.SessionResponse:
    """The answer in one message; a text or undecodable message is a broken server: raises
    INTERNAL (the caller drops the socket)."""
    if isinstance(data, str):
        raise Internal("the server sent a text message on the binary transport", fatal=True)
    try:
        return environment_pb2.SessionResponse.FromString(data)
    except Exception as e:  # noqa: BLE001 - a broken server: the stream cannot go on
        raise Internal(f"undecodable SessionResponse ({type(e).__name__})", fatal=True) from None


_CANCELLED = Unavailable("the stream was dropped by this client", fatal=True)


class WebsocketsChannel:
    """The ``Session`` stream on one WebSocket of the ``websockets`` library (the fallback);
    a :class:`~openenv.client.channel.Channel`."""

    __slots__ = ("_over", "_why", "_ws")

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._over = False  # the stream ended (and _why says why: None for its normal end)
        self._why: EnvError | None = None

    def _closed(self, e: Exception) -> EnvError | None:
        """Record how the socket ended (``e``: websockets' ConnectionClosed)."""
        if not self._over:
            rcvd, sent = getattr(e, "rcvd", None), getattr(e, "sent", None)
            if sent is not None and sent.code == 1009:  # our own limit: the server's answer was too large
                self._over, self._why = True, close_error(1009, _OVER_OUR_LIMIT)
            elif rcvd is not None:
                self._over, self._why = True, close_error(rcvd.code, rcvd.reason)
            else:
                self._over, self._why = True, close_error(None, "")
        return self._why

    async def send(self, request: environment_pb2.SessionRequest) -> None:
        if self._over:
            raise self._why or Unavailable("the WebSocket is closed", fatal=True)
        try:
            await self._ws.send(request.SerializeToString())
        except Exception as e:  # noqa: BLE001 - the socket is gone, whatever the library raised
            err = self._closed(e) if hasattr(e, "rcvd") else None
            raise err or Unavailable(f"{type(e).__name__}: {e}", fatal=True) from None

    async def receive(self) -> environment_pb2.SessionResponse | None:
        from websockets.exceptions import ConnectionClosed

        try:
            data = await self._ws.recv()
        except ConnectionClosed as e:
            err = self._closed(e)
            if err is None:
                return None
            raise err from None
        try:
            return _decode(data)
        except EnvError as e:
            self._drop(e)
            raise

    async def end(self) -> None:
        """Half-close: the transport's empty message (the server answers what it was sent,
        then ends the stream with close 1000)."""
        with contextlib.suppress(Exception):
            await self._ws.send(b"")

    def _drop(self, why: EnvError) -> None:
        if not self._over:
            self._over, self._why = True, why
        transport = self._ws.transport
        if transport is not None and not transport.is_closing():
            transport.abort()  # as a crashed client: no close frame

    async def close(self) -> None:
        self._drop(_CANCELLED)
        ws = self._ws
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), END_GRACE_S)
        if ws.transport is not None and not ws.transport.is_closing():
            ws.transport.abort()


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
    client's limit) queued for :class:`PicowsChannel`, and how the socket ended."""

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


class PicowsChannel:
    """The ``Session`` stream on one picows WebSocket; a :class:`~openenv.client.channel.Channel`."""

    __slots__ = ("_over", "_why", "_ws")

    def __init__(self, ws: _Listener) -> None:
        self._ws = ws
        self._over = False  # the stream ended (and _why says why: None for its normal end)
        self._why: EnvError | None = None

    def _ended(self) -> EnvError | None:
        """Record how the socket ended."""
        if not self._over:
            ws = self._ws
            if ws.sent_1009:  # our own limit: the server's answer was too large
                self._over, self._why = True, close_error(1009, _OVER_OUR_LIMIT)
            elif ws.received is not None:
                self._over, self._why = True, close_error(*ws.received)
            else:
                self._over, self._why = True, close_error(None, "")
        return self._why

    async def send(self, request: environment_pb2.SessionRequest) -> None:
        if self._over:
            raise self._why or Unavailable("the WebSocket is closed", fatal=True)
        ws = self._ws
        transport = ws.transport
        if ws.eof or transport.is_disconnected or transport.is_close_frame_sent:
            raise self._ended() or Unavailable("the WebSocket is closed", fatal=True)
        transport.send(_BINARY, request.SerializeToString())

    async def receive(self) -> environment_pb2.SessionResponse | None:
        ws = self._ws
        inbox = ws.inbox
        while not inbox:
            if ws.eof:
                err = self._ended()
                if err is None:
                    return None
                raise err
            ws.waiter = asyncio.get_running_loop().create_future()
            await ws.waiter
        try:
            return _decode(inbox.popleft())
        except EnvError as e:
            self._drop(e)
            raise

    async def end(self) -> None:
        """Half-close: the transport's empty message (the server answers what it was sent,
        then ends the stream with close 1000)."""
        transport = self._ws.transport
        if not transport.is_disconnected and not transport.is_close_frame_sent:
            transport.send(_BINARY, b"")

    def _drop(self, why: EnvError) -> None:
        if not self._over:
            self._over, self._why = True, why
        transport = self._ws.transport
        if not transport.is_disconnected:
            transport.underlying_transport.abort()  # as a crashed client: no close frame

    async def close(self) -> None:
        self._drop(_CANCELLED)
        transport = self._ws.transport
        if not transport.is_disconnected:  # pragma: no cover - dropped just above
            with contextlib.suppress(Exception):
                await asyncio.wait_for(transport.wait_disconnected(), END_GRACE_S)


async def _close_picows(ws: _Listener) -> None:
    """Close a picows WebSocket that carries no stream yet (refused after the upgrade)."""
    transport = ws.transport
    if transport is None or transport.is_disconnected:
        return
    with contextlib.suppress(Exception):
        if not transport.is_close_frame_sent:
            transport.send_close(1000)
        # Wait for the server's close (the close handshake), bounded: then the socket.
        await asyncio.wait_for(transport.wait_disconnected(), END_GRACE_S)
    if not transport.is_disconnected:
        transport.underlying_transport.abort()


class BinaryDialer:
    """Opens binary WebSocket streams to ``url`` (``ws(s)://``) with ``options``."""

    resumable = True
    coalesces = True
    answers_carry_ids = True

    def __init__(self, url: str, options: ConnectionOptions) -> None:
        self.url = self.info_key = url
        self.options = options
        self.secure = url.startswith("wss:")

    def _headers(self, first: bool) -> list[tuple[str, str]]:
        """The bearer token (RFC 0003) and, on a session's first socket, the caller's trace context."""
        token = self.options.token
        headers = [("authorization", f"Bearer {token}")] if token else []
        if first:
            headers += tracing.inject()
        return headers

    def _ssl(self) -> Any:
        o = self.options
        if not (self.secure and (o.ca_file or o.client_cert)):
            return None
        cert, key = o.client_cert or (None, None)
        return client_ssl_context(o.ca_file, cert, key)

    async def dial(
        self, handshake: environment_pb2.HandshakeRequest, timeout: float, *, first: bool
    ) -> PicowsChannel | WebsocketsChannel:
        if picows is not None:
            return await self._dial_picows(timeout, first)
        return await self._dial_websockets(timeout, first)

    async def _dial_websockets(self, timeout: float, first: bool) -> WebsocketsChannel:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake

        o = self.options
        kw: dict[str, Any] = {
            "subprotocols": [BINARY_SUBPROTOCOL],
            "max_size": o.max_message_bytes,
            "compression": None,  # small messages are cheaper raw; the server does not offer it either
            "ping_interval": o.keepalive_s or None,
            "ping_timeout": o.keepalive_timeout_s,
            "close_timeout": END_GRACE_S,
        }
        headers = self._headers(first)
        if headers:
            kw["additional_headers"] = headers
        if is_loopback(self.url):
            kw["proxy"] = None
        ssl = self._ssl()
        if ssl is not None:
            kw["ssl"] = ssl
        try:
            ws = await connect(self.url, open_timeout=timeout, **kw)
        except (OSError, TimeoutError):
            raise Unreachable() from None
        except InvalidHandshake as e:
            raise _refusal(e, self.url) from None
        channel = WebsocketsChannel(ws)
        if ws.subprotocol != BINARY_SUBPROTOCOL:
            await channel.close()
            raise Unimplemented(f"{self.url} did not select the subprotocol {BINARY_SUBPROTOCOL}", fatal=True)
        return channel

    async def _dial_picows(self, timeout: float, first: bool) -> PicowsChannel:
        assert picows is not None
        o = self.options
        headers = [("Sec-WebSocket-Protocol", BINARY_SUBPROTOCOL), *self._headers(first)]
        kw: dict[str, Any] = {"extra_headers": headers, "proxy": _proxy_for(self.url)}
        if o.keepalive_s:
            kw.update(
                enable_auto_ping=True,
                auto_ping_idle_timeout=o.keepalive_s,
                auto_ping_reply_timeout=o.keepalive_timeout_s,
            )
        ssl = self._ssl()
        if ssl is not None:
            kw["ssl_context"] = ssl
        limit = o.max_message_bytes
        try:
            transport, listener = await asyncio.wait_for(
                picows.ws_connect(
                    lambda: _Listener(limit),
                    self.url,
                    websocket_handshake_timeout=timeout,
                    max_frame_size=limit,
                    max_redirects=0,
                    logger_name="openenv.client.binary",
                    **kw,
                ),
                timeout,
            )
        except picows.WSHandshakeError as e:
            if getattr(e, "response", None) is None:  # no HTTP answer in time (or a broken one)
                raise Unreachable(f"{type(e).__name__}: {e}") from None
            raise _refusal(e, self.url) from None
        except (OSError, TimeoutError) as e:
            raise Unreachable(f"{type(e).__name__}: {e}") from None
        ws: _Listener = listener  # type: ignore[assignment]  # ours: made by the factory above
        if transport.response is None:  # the server closed before answering (seen under a 16k burst)
            await _close_picows(ws)
            raise Unreachable("the server closed the connection before answering the upgrade")
        if transport.response.headers.get("Sec-WebSocket-Protocol") != BINARY_SUBPROTOCOL:
            await _close_picows(ws)
            raise Unimplemented(f"{self.url} did not select the subprotocol {BINARY_SUBPROTOCOL}", fatal=True)
        return PicowsChannel(ws)


class BinaryWsConnection(ClientSession):
    """One session over the binary WebSocket transport; a :class:`~openenv.client.Connection`
    (see the module docstring). ``url``: ``ws(s)://host:port[/prefix]/v1/session`` (``http(s)``
    is taken as ``ws(s)``); ``options``: :class:`~openenv.client.ConnectionOptions`, whose fields
    the keywords replace when given."""

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
        opts = (options or ConnectionOptions()).merged(
            max_message_bytes=max_message_bytes,
            keepalive_s=keepalive_s,
            token=token,
            ca_file=ca_file,
            client_cert=client_cert,
        )
        super().__init__(BinaryDialer(scheme + sep + rest, opts), opts)
        self.target = rest.split("/", 1)[0]
        self.secure = scheme == "wss"

    def sibling(self) -> BinaryWsConnection:
        """A new, unopened connection to the same server with the same settings."""
        return BinaryWsConnection(self.url, options=self.options)
