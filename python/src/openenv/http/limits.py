"""Bounds on what one HTTP connection may cost before the application sees it (RFC 0003).

uvicorn's ``httptools`` protocol puts no limit on the request line and headers, and no
deadline on reading them: one anonymous client could send megabytes of headers (each byte
held in Python objects) or keep thousands of half-sent requests open (slowloris).
:class:`GuardedHttpProtocol` adds, per connection:

* a cap on the request line plus headers (:attr:`HttpLimits.max_head_bytes`, 16 KiB):
  414 when the request line alone is over it, else 431; also 431 beyond
  :attr:`~HttpLimits.max_headers` header lines. The bytes are counted as they arrive,
  before the parser buffers them, so memory stays bounded;
* a head deadline (:attr:`~HttpLimits.head_timeout_s`): a connection that has not sent a
  complete request head within it (including one that sends nothing) gets 408 and is closed;
* a body deadline (:attr:`~HttpLimits.body_timeout_s`): a request body not complete within
  it closes the connection (the application sees a disconnect).

Both deadlines count the peer's time, not the server's (:class:`~openenv.http.deadline.PatientDeadline`):
time the event loop was starved is given back, and what arrived before a deadline is read
before it is judged, so a connect burst that saturates the server does not close the
connections it accepted but could not read in time.

Keep-alive idling is uvicorn's ``timeout_keep_alive``; the number of connections its
``limit_concurrency`` (503 beyond).

:class:`GuardedWsProtocol` bounds the send side of a WebSocket: a send that cannot be
written within :attr:`~HttpLimits.ws_send_timeout_s` (a peer that does not read, so the
socket's buffer stays full) aborts the connection, which frees its session; and a missed
keepalive pong aborts it too (closing gracefully would wait for that same full buffer to
drain, forever).

:func:`bounded_loads` parses a JSON frame or body only when it holds at most
:data:`MAX_JSON_CONTAINERS` objects and arrays: 15 MB of ``{}`` would otherwise become
millions of Python dicts (~30x the bytes in memory) before any validation could refuse them;
and at most one value, key or string per 8 bytes (:func:`openenv.runtime.granularity.json_refusal`):
15 MB of ``"a",`` would become 4 million strings (~25x).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from openenv.http.budget import RECEIVE_BUDGET, ReceiveBudget, Unfinished
from openenv.http.deadline import PatientDeadline
from openenv.json_protocol import frames
from openenv.runtime.granularity import json_refusal
from openenv.settings import HttpLimits  # declared with the other settings (no extra needed)

__all__ = [
    "MAX_JSON_CONTAINERS",
    "PARSED",
    "UNPARSED",
    "GuardedHttpProtocol",
    "GuardedWsProtocol",
    "HttpLimits",
    "bounded_loads",
    "check_json",
    "protocol_classes",
]

PARSED = "openenv.frame"
"""Key of a ``websocket.receive`` message holding its frame, already parsed by :func:`bounded_loads`
(the observing middleware parses each ``/ws`` frame once for itself and the bridge)."""
UNPARSED = "openenv.frame_error"
"""Key of a ``websocket.receive`` message holding why :func:`bounded_loads` refused its text."""

MAX_JSON_CONTAINERS = 100_000
"""Most JSON objects plus arrays in one frame or body (counted as ``{`` and ``[`` bytes, so
brackets inside strings count too: a bound, never a miss)."""


def bounded_loads(raw: str | bytes) -> Any:
    """:func:`openenv.json_protocol.frames.loads`, refusing (ValueError) before parsing it a text with
    more than :data:`MAX_JSON_CONTAINERS` objects and arrays, or too fine-grained
    (:func:`openenv.runtime.granularity.json_refusal`)."""
    check_json(raw)
    return frames.loads(raw)


def check_json(raw: str | bytes) -> None:
    """Raise ValueError when :func:`bounded_loads` would refuse ``raw`` unparsed."""
    if isinstance(raw, str):
        n = raw.count("{") + raw.count("[")
    else:
        n = raw.count(b"{") + raw.count(b"[")
    if n > MAX_JSON_CONTAINERS:
        raise ValueError(f"more than {MAX_JSON_CONTAINERS} JSON objects and arrays ({n}): refused unparsed")
    why = json_refusal(raw)
    if why is not None:
        raise ValueError(why)


_STATUS = {408: b"Request Timeout", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of :class:`HttpLimits`."""

    limits = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._head_lines = 0
        self._line_len: int | None = None  # length of the request line, once seen
        self._tail = b""
        self._head_timer: PatientDeadline | None = None
        self._body_timer: PatientDeadline | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            if self._head_timer is None:
                self._arm_head_timer()
            if not self._count_head(data):
                return
        super().data_received(data)

    def _count_head(self, data: bytes) -> bool:
        """Account ``data`` to the current request head; False when it was refused."""
        lim = self.limits
        joined = self._tail + data
        end = joined.find(b"\r\n\r\n")
        part = data if end < 0 else joined[len(self._tail) : end + 4]
        if self._line_len is None and (nl := part.find(b"\n")) >= 0:
            self._line_len = self._head_bytes + nl
        self._head_bytes += len(part)
        self._head_lines += part.count(b"\n")
        if self._head_bytes > lim.max_head_bytes or self._head_lines > lim.max_headers + 2:
            long_line = self._line_len is None or self._line_len > lim.max_head_bytes
            self._refuse(414 if long_line else 431)
            return False
        if end < 0:
            self._tail = joined[-3:]
        else:
            self._end_of_head()
        return True

    def _end_of_head(self) -> None:
        self._in_head = False
        self._tail = b""
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            self._body_timer = PatientDeadline(self.loop, self.limits.body_timeout_s, self._body_timeout)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._in_head, self._head_bytes, self._head_lines, self._tail = True, 0, 0, b""
        self._line_len = None

    def _arm_head_timer(self) -> None:
        self._head_timer = PatientDeadline(self.loop, self.limits.head_timeout_s, self._head_timeout)

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            if self._head_bytes:
                self._refuse(408)
            else:  # nothing sent at all: no answer owed
                self.transport.close()

    def _body_timeout(self) -> None:
        self._body_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def _cancel_timers(self) -> None:
        for t in (self._head_timer, self._body_timer):
            if t is not None:
                t.cancel()
        self._head_timer = self._body_timer = None

    def _refuse(self, status: int) -> None:
        self._cancel_timers()
        if self.transport.is_closing():
            return
        body = b'{"detail":"' + _STATUS[status] + b'"}'
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, _STATUS[status], len(body), body)
        )
        self.transport.close()


class GuardedWsProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets-sansio protocol with a bounded send (see the module's text) and
    bounded unfinished messages (:mod:`openenv.http.budget`: a deadline from a message's first
    byte, 1008 past it; the process's budget, 1009 beyond it). The framing rules are
    websockets' (RFC 6455 strict: reserved bits, opcodes, control frames fail with 1002)."""

    limits = HttpLimits()
    budget: ReceiveBudget = RECEIVE_BUDGET

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unfinished = Unfinished("")
        self._message_deadline: PatientDeadline | None = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.handshake_complete or self.handshake_initiated:
            self._settle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        super().connection_lost(exc)
        # The unfinished message's bytes go now, not when the cyclic GC next frees this
        # protocol (it and its task refer to each other): 1,000 refused connections kept
        # hundreds of MiB until the GC ran (measured).
        self.frames = []
        with contextlib.suppress(AttributeError):
            del self.conn.reader.buffer[:]
            self.conn.parser.close()  # its locals hold the last frame parsed (a fragment's bytes)

    def _settle(self) -> None:
        """Charge the bytes of the message not yet received whole (websockets' parser holds a
        partial frame; uvicorn the frames of a fragmented message) to the budget."""
        if self.transport.is_closing():
            self._release()
            return
        held = len(self.conn.reader.buffer) + sum(len(f) for f in self.frames)
        if not held:
            self._release()
            return
        lim = self.limits
        if not self._unfinished.client and self.client:
            self._unfinished.client = str(self.client[0])
        why = self.budget.hold(self._unfinished, held, lim.unfinished_bytes, lim.unfinished_bytes_per_client)
        if why is not None:
            self._fail(1009, why)
        elif self._message_deadline is None:
            self._message_deadline = PatientDeadline(self.loop, lim.message_timeout_s, self._message_expired)

    def _message_expired(self) -> None:
        self._message_deadline = None
        self.budget.expired_total += 1
        self._fail(1008, f"a message not complete within {self.limits.message_timeout_s:g} s")

    def _fail(self, code: int, why: str) -> None:
        self._release()
        self.frames = []
        if not self.transport.is_closing():
            with contextlib.suppress(Exception):  # the state may not allow a close frame: then none
                self.conn.send_close(code, why[:120])
                self.transport.write(b"".join(self.conn.data_to_send()))
            self.transport.close()

    def _release(self) -> None:
        self.budget.release(self._unfinished)
        if self._message_deadline is not None:
            self._message_deadline.cancel()
            self._message_deadline = None

    async def send(self, message: Any) -> None:
        if not self.writable.is_set():
            try:
                await asyncio.wait_for(self.writable.wait(), self.limits.ws_send_timeout_s)
            except TimeoutError:
                self.transport.abort()  # the peer does not read: drop it, free its session
                raise ClientDisconnected() from None
        await super().send(message)

    def keepalive_timeout(self) -> None:
        super().keepalive_timeout()
        self.transport.abort()  # close() would wait for a full buffer to drain


def protocol_classes(limits: HttpLimits) -> tuple[type[GuardedHttpProtocol], type[GuardedWsProtocol]]:
    """The HTTP and WebSocket protocol classes bound to ``limits`` (uvicorn instantiates them)."""
    http = type("GuardedHttpProtocol", (GuardedHttpProtocol,), {"limits": limits})
    ws = type("GuardedWsProtocol", (GuardedWsProtocol,), {"limits": limits})
    return http, ws
