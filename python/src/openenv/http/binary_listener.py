"""The binary WebSocket transport on a listener of its own, on picows (RFC 0011).

``openenv.Host(..., binary_port=N)`` (``openenv serve --binary-port N``) serves
``ws(s)://host:N/v1/session`` with this listener beside the HTTP one: the same transport as
``/v1/session`` on the HTTP listener (:mod:`openenv.http.binary`), the same engine and
sessions as every other listener of the host, at a fraction of the per-message cost (picows
parses and frames in Cython; docs/performance.md, "Binary WebSocket"). What a client may rely
on is the HTTP listener's ``/v1/session`` contract, rule for rule:

* the upgrade: ``Host``/``Origin`` policy (403), then the bearer token (401, as
  ``Authorization: Bearer``, an offered ``bearer.<token>`` subprotocol or ``?access_token=``),
  then the subprotocol ``openenv.v1+proto`` (400, a JSON ``detail`` naming it); refusals carry
  the HTTP side's JSON body (``detail``, ``status``). The side calls are the HTTP
  listener's documents, for ``GET`` only: ``/openenv/info`` (``GetInfo``), ``/load``
  (``GetLoad``), ``/health`` (open, without a token; 503 while draining). Any other path is 404.
  An upgrade request not complete within ``HttpLimits.head_timeout_s`` of the peer's time is
  dropped (time the server's loop was starved is given back: :mod:`openenv.http.deadline`); more than
  ``HttpSettings.max_connections`` connections are refused with 503;
* TLS is the server's (:class:`~openenv.security.TlsConfig`, ``wss://``);
* messages: binary ones carry ``SessionRequest``s; a text message or undecodable bytes are
  answered in band (``INVALID_ARGUMENT``, non-fatal); an empty binary message is the client's
  half-close; a message (or a fragmented message's total) over the limit closes with 1009;
  requests wait in a bounded queue (:data:`INBOX_HIGH_MESSAGES`, :data:`INBOX_HIGH_BYTES`):
  past it the socket is not read, and TCP holds back a client that sends faster than its
  session runs;
* how it ends: 1000 after a close answer or a fatal error answer or a half-close's answers,
  ``4000 + code`` with the status message as reason when the server ends the stream (handshake
  deadline, idle reaper, drain, taken over by a resume); a client that drops the socket has
  ended its input (a resumable session is parked). Keepalive pings follow
  ``HttpSettings.ws_ping_interval``/``ws_ping_timeout``; a client that does not read for
  ``HttpLimits.ws_send_timeout_s`` is dropped.

Needs picows (the ``http`` extra).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from typing import Any, NoReturn

from google.protobuf import json_format
from picows import (
    WSAutoPingStrategy,
    WSFrame,
    WSListener,
    WSMsgType,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)
from picows.picows import WSProtocol  # type: ignore[attr-defined]  # ws_create_server builds it; not in the stubs

from openenv.engine import Engine, Incoming, bounded_serializer
from openenv.errors import ErrorCode
from openenv.http.binary import (
    PATH,
    SUBPROTOCOL,
    TEXT_MESSAGE,
    Ended,
    close_code,
    close_reason,
    decode,
    peer_name,
    run_session,
    subprotocol_refusal,
)
from openenv.http.budget import RECEIVE_BUDGET, ReceiveBudget, Unfinished, release_pages
from openenv.http.deadline import PatientDeadline
from openenv.http.listener import listen_backlog
from openenv.json_protocol import frames
from openenv.json_protocol.payloads import info_to_json
from openenv.runtime.load import server_load
from openenv.security import BrowserPolicy, SecuritySettings
from openenv.settings import HttpSettings
from openenv.v1 import environment_pb2

log = logging.getLogger("openenv.http")

__all__ = ["BinaryListener"]

_PATH = PATH.encode()
_BINARY, _TEXT, _CONT, _CLOSE = WSMsgType.BINARY, WSMsgType.TEXT, WSMsgType.CONTINUATION, WSMsgType.CLOSE
_GOING_AWAY = 1001
_DOCUMENTS = frozenset({b"/openenv/info", b"/load", b"/health"})
#: Requests decoded and queued for the engine before the socket is no longer read (it is read
#: again when the engine has taken the queue down to a quarter): a client that sends without
#: reading its answers (the engine then waits on the full socket) meets TCP's backpressure
#: instead of filling the server's memory, as gRPC's flow control and the HTTP listener's
#: queue bound it. Generous enough that pipelining clients never notice it.
INBOX_HIGH_MESSAGES = 256
INBOX_HIGH_BYTES = 8 * 1024 * 1024


def _header_size(payload: int) -> int:
    """The bytes of a client frame's header (with its mask) before a payload of this size."""
    return 6 if payload < 126 else 8 if payload < 65536 else 14


def _document(status: int, doc: object) -> WSUpgradeResponseWithListener:
    """A plain HTTP answer (a side call's JSON document); picows closes the connection after it."""
    body = frames.dumps(doc).encode()
    headers = {"Content-Type": "application/json"}
    if status < 400:
        return WSUpgradeResponseWithListener(WSUpgradeResponse.create_ok_response(body, headers), None)
    return WSUpgradeResponseWithListener(WSUpgradeResponse.create_error_response(status, body, headers), None)


def _refusal(status: int, code: str, why: str) -> WSUpgradeResponseWithListener:
    """The HTTP refusal of an upgrade, with the HTTP side's JSON body."""
    headers = {"Content-Type": "application/json"}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="openenv"'
    body = frames.dumps({"detail": why, "status": code}).encode()
    return WSUpgradeResponseWithListener(WSUpgradeResponse.create_error_response(status, body, headers), None)


class _Connection(WSListener):
    """One accepted WebSocket: picows' listener (frames in) and the engine's
    :class:`~openenv.engine.Stream` (requests out, answers in), on the event loop's thread.

    Frames are decoded as they arrive (one parse per message, in the read callback) and queued;
    the engine's task reads them in order."""

    def __init__(self, server: BinaryListener, request: WSUpgradeRequest) -> None:
        self._server = server
        self._headers = tuple((k.lower(), v) for k, v in request.headers.items())
        self._serialize = bounded_serializer(server.limit)
        self._inbox: collections.deque[Incoming] = collections.deque()
        self._inbox_bytes = 0  # the wire size of the queued requests
        self._sizes: collections.deque[int] = collections.deque()  # ... each one's
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._parts: list[bytes] | None = None  # a fragmented message's frames so far
        self._parts_text = False
        self._parts_size = 0
        # Bytes received and not yet part of a whole frame (picows holds them), and this
        # connection's share of the process's budget for unfinished messages (issue 50).
        self._pending = 0
        self._buffer = 0  # the most picows' read buffer may have grown to (see _settle)
        self._unfinished = Unfinished("")
        self._message_deadline: PatientDeadline | None = None
        self._eof = False  # no more requests: half-closed, closed or gone
        self._writable: asyncio.Future[None] | None = None  # set while the socket's buffer is full
        self.transport: WSTransport | None = None
        self.task: asyncio.Task[None] | None = None
        self.closed = False  # our close frame is sent or the socket is gone
        self.gone = False  # a write found the client gone
        self._peer = ""

    # ---------------------------------------------------------------- picows' callbacks

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        peer = transport.underlying_transport.get_extra_info("peername")
        self._peer = peer_name(peer[0], peer[1]) if peer else ""
        self._unfinished.client = str(peer[0]) if peer else ""
        self.task = asyncio.get_running_loop().create_task(self._run())
        self._server.connections.add(self)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        # The frame's bytes have left picows' read buffer: what is still there is a frame not
        # received whole (its header is 2, 4 or 10 bytes, plus the client's 4-byte mask).
        size = frame.payload_size
        self._pending = 0 if frame.last_in_buffer else max(0, self._pending - size - _header_size(size))
        kind = frame.msg_type
        if frame.rsv1 or frame.rsv2 or frame.rsv3:
            # No extension is negotiated: RFC 6455 (5.2) says the connection MUST fail.
            # (picows checks opcodes and control frames' size and fragmentation itself.)
            self._fail(1002, "a frame with a reserved bit set (no extension is negotiated)")
        elif kind is _BINARY and frame.fin and self._parts is None:  # the hot path: one frame, one message
            self._push(decode(frame.get_payload_as_bytes()), size)
        elif kind is _BINARY or kind is _TEXT:
            if self._parts is not None:  # a new message inside a fragmented one: a broken client
                self._fail(1002, "a new message inside a fragmented one")
            elif frame.fin:  # a whole text message: not this transport's, answered in band
                self._push(TEXT_MESSAGE)
            else:
                self._parts, self._parts_text, self._parts_size = [], kind is _TEXT, 0
                self._fragment(frame)
        elif kind is _CONT:
            if self._parts is None:
                self._fail(1002, "a continuation frame outside a fragmented message")
            else:
                self._fragment(frame)
        elif kind is _CLOSE:
            # The client ended both directions: answer its close as RFC 6455 asks and drop the
            # socket; to the engine its input has ended (a resumable session is parked).
            if not transport.is_close_frame_sent:
                transport.send_close(frame.get_close_code(), frame.get_close_message())
            self.closed = True
            transport.disconnect()
            self._end_input()
        # PING is answered by picows (auto-pong); a PONG needs nothing.

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.closed = True
        self._parts = None
        self._pending = 0
        self._settle()
        self._end_input()
        self._wake_writer()
        self._server.connections.discard(self)
        # picows' protocol (and its read buffer, as large as the largest message read) holds
        # this listener, which held the transport, which holds the protocol: a cycle only the
        # cyclic GC frees, after it next runs (1,000 refused connections kept ~680 MiB of
        # buffers until then, measured). Without the transport the protocol is freed now.
        self.transport = None

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    # ---------------------------------------------------------------- incoming messages

    def received(self, nbytes: int) -> None:
        """``nbytes`` more arrived (before picows parses them: :meth:`_Protocol.buffer_updated`)."""
        self._pending += nbytes
        self._buffer = max(self._buffer, 2 * self._pending)

    def _settle(self) -> None:
        """After a read: charge what this connection's unfinished message holds to the budget
        (close 1009 beyond it), and give that message :attr:`HttpLimits.message_timeout_s`
        from its first byte (close 1008 past it); release both once nothing is unfinished."""
        server = self._server
        # picows doubles its read buffer as a frame arrives (at 90% full) and keeps it at that
        # size for the connection's life: while a message is unfinished the connection is
        # charged that buffer (up to twice the largest frame's bytes it has held) plus the
        # fragments it keeps.
        self._buffer = max(self._buffer, 2 * self._pending)
        unfinished = self._pending or self._parts is not None
        held = 0 if self.closed or not unfinished else self._buffer + self._parts_size * (self._parts is not None)
        if not held:
            server.budget.release(self._unfinished)
            if self._message_deadline is not None:
                self._message_deadline.cancel()
                self._message_deadline = None
            return
        why = server.budget.hold(self._unfinished, held, server.unfinished_bytes, server.unfinished_per_client)
        if why is not None:
            log.warning("a connection from %s is closed: %s", self._unfinished.client or "?", why)
            self._fail(1009, why)
            self._pending = 0
            self._settle()
        elif self._message_deadline is None:
            self._message_deadline = PatientDeadline(
                asyncio.get_running_loop(), server.message_timeout_s, self._message_expired
            )

    def _message_expired(self) -> None:
        self._message_deadline = None
        self._server.budget.expired_total += 1
        self._fail(1008, f"a message not complete within {self._server.message_timeout_s:g} s")
        self._pending = 0
        self._settle()

    def _fragment(self, frame: WSFrame) -> None:
        assert self._parts is not None
        self._parts_size += frame.payload_size
        if self._parts_size > self._server.limit:  # the message's total, as picows bounds a frame
            self._fail(1009, f"message exceeds {self._server.limit} bytes")
            return
        if not self._parts_text:
            self._parts.append(frame.get_payload_as_bytes())
        if frame.fin:
            parts, self._parts = self._parts, None
            self._push(TEXT_MESSAGE if self._parts_text else decode(b"".join(parts)), self._parts_size)

    def _push(self, item: Incoming, size: int = 0) -> None:
        if self._eof:  # after the half-close nothing more is read (as the HTTP listener)
            return
        if item is None:
            self._eof = True
        self._inbox.append(item)
        self._sizes.append(size)
        self._inbox_bytes += size
        if (
            not self._reading_paused
            and (len(self._inbox) >= INBOX_HIGH_MESSAGES or self._inbox_bytes >= INBOX_HIGH_BYTES)
            and self.transport is not None
        ):
            self._reading_paused = True  # the engine is behind: let TCP hold the client back
            self.transport.underlying_transport.pause_reading()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _end_input(self) -> None:
        if not self._eof:
            self._push(None)

    def _fail(self, code: int, why: str) -> None:
        """Close a connection that broke the WebSocket rules (or the size limit)."""
        self._parts = None
        transport = self.transport
        if transport is not None and not self.closed:
            transport.send_close(code, close_reason(why).encode())  # type: ignore[arg-type]  # any int code goes (the stub says its enum)
            transport.disconnect()
        self.closed = True
        self._end_input()

    def _wake_writer(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # ---------------------------------------------------------------- the engine's Stream

    async def read(self) -> Incoming:
        inbox = self._inbox
        while not inbox:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        self._waiter = None
        self._inbox_bytes -= self._sizes.popleft()
        if (
            self._reading_paused
            and len(inbox) <= INBOX_HIGH_MESSAGES // 4
            and self._inbox_bytes <= INBOX_HIGH_BYTES // 4
            and not self.closed
            and self.transport is not None
        ):
            self._reading_paused = False
            self.transport.underlying_transport.resume_reading()
        return inbox.popleft()

    encode_result = None  # the engine's Stream: results encoded as protobuf
    relayed = False  # a client's own stream (not relayed by a sibling worker)

    async def write(self, response: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        transport = self.transport
        if self.closed or transport is None or transport.is_disconnected:
            # The client went away while its request ran: to the engine a cancelled stream, as
            # grpc.aio cancels the handler of a dropped call, so a resumable session is parked.
            self.gone = self.closed = True
            raise asyncio.CancelledError
        transport.send(_BINARY, self._serialize(response))
        if self._writable is not None:  # the socket's buffer is full: the client does not read
            try:
                await asyncio.wait_for(asyncio.shield(self._writable), self._server.send_timeout_s)
            except TimeoutError:
                self.gone = self.closed = True
                transport.disconnect(False)
                raise asyncio.CancelledError from None
            if self.closed:
                self.gone = True
                raise asyncio.CancelledError

    async def abort(self, code: ErrorCode, message: str) -> NoReturn:
        self._close(close_code(code), message)
        raise Ended(message)

    def peer(self) -> str:
        return self._peer

    def metadata(self) -> Sequence[tuple[str, str]]:
        return self._headers

    # ----------------------------------------------------------------

    def _close(self, code: int, reason: str = "") -> None:
        transport = self.transport
        if not self.closed and transport is not None:
            transport.send_close(code, close_reason(reason).encode())  # type: ignore[arg-type]  # any int code goes (the stub says its enum)
            transport.disconnect()  # graceful: what is buffered (the close frame) is sent first
        self.closed = True

    async def _run(self) -> None:
        try:
            if await run_session(self._server.engine, self):
                self._close(1000)
        except asyncio.CancelledError:  # the listener is stopping
            self._close(_GOING_AWAY, "the server is shutting down")
            raise
        except BaseException:
            self._close(1011, "internal error")
            raise


RETURN_BUFFER_FROM = 1 << 20
"""A connection's read buffer that grew to this many bytes goes back to the OS once no frame
is in it (see :meth:`_Protocol.buffer_updated`); smaller ones stay, for the next message."""


class _Protocol(WSProtocol):  # type: ignore[misc]  # picows' Cython class
    """picows' server protocol with the upgrade deadline of the HTTP side: a connection that
    has not completed its upgrade within ``deadline_s`` of the peer's time is dropped, as
    picows' own deadline drops it, but time the loop was starved does not count
    (:class:`~openenv.http.deadline.PatientDeadline`)."""

    def __init__(self, deadline_s: float, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._deadline_s = deadline_s
        self._deadline: PatientDeadline | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._deadline = PatientDeadline(asyncio.get_running_loop(), self._deadline_s, self._expired)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def buffer_updated(self, nbytes: int) -> None:
        conn = self.listener
        if not isinstance(conn, _Connection):  # the upgrade request (bounded by the head deadline)
            super().buffer_updated(nbytes)
            return
        conn.received(nbytes)
        super().buffer_updated(nbytes)  # the frames now whole reach on_ws_frame
        conn._settle()
        if conn._buffer >= RETURN_BUFFER_FROM and not conn._pending and not conn.closed:
            # picows keeps its read buffer as large as the largest frame it held (up to twice
            # max_message_bytes) for the connection's life, and offers no way to shrink it:
            # 1,000 connections that each sent one 4 MiB message would keep ~8 GiB. With no
            # frame in it, all of it is free space (get_buffer's view, where the next read
            # lands): its pages go back to the OS, and only the next large frame touches them
            # again (issue 50).
            release_pages(super().get_buffer(0))
            conn._buffer = 0

    def _expired(self) -> None:
        if self.listener is None and not self.transport.is_disconnected:  # not upgraded yet
            self.transport.disconnect()


class BinaryListener:
    """The binary transport's own listener (see the module docstring): picows on
    ``host:port`` (0: a free port), serving ``engine`` (the host's).

    Args:
        engine: the protocol engine (the host's: one pool of sessions for every listener).
        host, port: where to listen.
        security: tokens, TLS and the Origin/Host policy (the server's).
        http: keepalive, connection cap and deadlines (:class:`~openenv.settings.HttpSettings`).
        max_message_bytes: the message bound, both ways.
    """

    def __init__(
        self,
        engine: Engine,
        host: str,
        port: int,
        *,
        security: SecuritySettings,
        http: HttpSettings,
        max_message_bytes: int,
        reuse_port: bool = False,
    ) -> None:
        self.engine, self.host, self.port = engine, host, port
        self.reuse_port = reuse_port  # several worker processes share the port (openenv.workers)
        self.security, self.http = security, http
        self.limit = max_message_bytes
        self.send_timeout_s = http.limits.ws_send_timeout_s
        self.message_timeout_s = http.limits.message_timeout_s
        self.unfinished_bytes = http.limits.unfinished_bytes
        self.unfinished_per_client = http.limits.unfinished_bytes_per_client
        #: The process's budget for unfinished messages (:mod:`openenv.http.budget`).
        self.budget: ReceiveBudget = RECEIVE_BUDGET
        self.tokens = security.tokens
        self.auth = engine.authenticator  # the server's one token check (security.auth)
        self.browser = BrowserPolicy(security.allowed_origins, security.allowed_hosts, bind_host=host)
        self.connections: set[_Connection] = set()
        self._info = frames.dumps(info_to_json(engine.manager.runtime.info))
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        """``ws(s)://host:port/v1/session``."""
        scheme = "wss" if self.security.tls is not None else "ws"
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else ("[::1]" if self.host == "::" else self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.port}{PATH}"

    async def start(self) -> BinaryListener:
        ping = self.http.ws_ping_interval or 0.0
        tls = self.security.tls
        deadline_s = self.http.limits.head_timeout_s

        def protocol() -> _Protocol:  # as picows' ws_create_server makes them, our deadline instead of its own
            return _Protocol(
                deadline_s,
                host_port=None,
                ws_path=None,
                is_client_side=False,
                ws_listener_factory=self._upgrade,
                logger=log,
                disconnect_on_exception=True,
                websocket_handshake_timeout=None,
                enable_auto_ping=ping > 0,
                auto_ping_idle_timeout=ping or 20.0,
                auto_ping_reply_timeout=self.http.ws_ping_timeout or 1e9,
                auto_ping_strategy=WSAutoPingStrategy.PING_WHEN_IDLE,
                enable_auto_pong=True,
                max_frame_size=self.limit,
                extra_headers=None,
                read_buffer_init_size=16 * 1024,
            )

        self._server = await asyncio.get_running_loop().create_server(
            protocol,
            self.host,
            self.port,
            ssl=tls.server_ssl_context() if tls is not None else None,
            reuse_port=self.reuse_port or None,
            backlog=listen_backlog(self.http.max_connections),
        )
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        return self

    def _upgrade(self, request: WSUpgradeRequest) -> WSUpgradeResponseWithListener:
        """Admit or refuse one upgrade request (see the module docstring); never raises."""
        path, _, query = request.path.partition(b"?")
        if path != _PATH and path not in _DOCUMENTS:
            return _refusal(404, "NOT_FOUND", f"not found: the binary session transport is at {PATH}")
        h = request.headers
        why = self.browser.refusal(h.get("host"), h.get("origin"))
        if why is not None:
            return _refusal(403, "PERMISSION_DENIED", why)
        if path == b"/health":  # open, as on the HTTP listener: orchestrators probe it without a token
            draining = self.engine.manager.draining
            return _document(503 if draining else 200, {"status": "unhealthy" if draining else "healthy"})
        offered = [p.strip() for v in h.getall("sec-websocket-protocol", ()) for p in v.split(",") if p.strip()]
        why, _ = self.auth.websocket_refusal(h.get("authorization"), offered, query.decode("latin-1"))
        if why is not None:
            return _refusal(401, "UNAUTHENTICATED", why)
        if path != _PATH:
            return self._side_call(path)
        body = subprotocol_refusal(offered)
        if body is not None:
            headers = {"Content-Type": "application/json"}
            return WSUpgradeResponseWithListener(WSUpgradeResponse.create_error_response(400, body, headers), None)
        if len(self.connections) >= self.http.max_connections:
            return _refusal(503, "UNAVAILABLE", "too many connections")
        response = WSUpgradeResponse.create_101_response({"Sec-WebSocket-Protocol": SUBPROTOCOL})
        return WSUpgradeResponseWithListener(response, _Connection(self, request))

    def _side_call(self, path: bytes) -> WSUpgradeResponseWithListener:
        if path == b"/openenv/info":
            return WSUpgradeResponseWithListener(
                WSUpgradeResponse.create_ok_response(self._info.encode(), {"Content-Type": "application/json"}), None
            )
        if self.engine.workers is None:
            load = server_load(self.engine.manager)
            return _document(
                200,
                json_format.MessageToDict(
                    load, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
                ),
            )
        # Several workers (RFC 0013): this call cannot wait for the siblings' answers, so the
        # others' part is as of the last GetLoad, /load or /health any worker's listener served.
        report = self.engine.load()
        doc = json_format.MessageToDict(
            report.load, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        doc["workers"] = [
            json_format.MessageToDict(w, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
            for w in report.workers
        ]
        return _document(200, doc)

    async def stop(self) -> None:
        """Stop listening and end every connection (close 1001; the host has drained the
        sessions first, so what is left is sockets whose sessions are over)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = [c.task for c in list(self.connections) if c.task is not None and not c.task.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in list(self.connections):
            if c.transport is not None:
                c.transport.disconnect(False)
        await server.wait_closed()
