"""The protocol's binary WebSocket transport: ``/v1/session`` (RFC 0011).

Served on the HTTP listener (this module, uvicorn's WebSocket) and, when ``binary_port`` is
given to :class:`openenv.Host` (``openenv serve --binary-port``), on a listener of its own
(:mod:`openenv.http.binary_listener`, picows): the same rules, the same answers. The
transport-neutral part is here and shared by both: :func:`decode`, :data:`TEXT_MESSAGE`,
:func:`close_code`, :func:`close_reason`, :func:`run_session`, :func:`subprotocol_refusal`.

One ``openenv.v1.SessionRequest`` per binary WebSocket message from the client, one
``SessionResponse`` per binary message from the server: the same messages, in the same
order, as the gRPC ``Session`` stream, served by the same :class:`~openenv.engine.Engine`
(handshake and its deadline, every request kind, pipelined messages, resume, capabilities).
What a client may rely on (docs/protocol.md, "Binary WebSocket"):

* **Subprotocol.** The client must offer :data:`SUBPROTOCOL` (``openenv.v1+proto``, the
  contract's major version and encoding) and the server selects it. An upgrade that does not
  offer it is refused with HTTP 400 (a JSON ``detail`` naming the subprotocol) before any
  session exists: a client of another major version fails at connect, not at its first message.
* **Tokens, Origin, TLS.** The HTTP listener's guard (:mod:`openenv.http.guard`) checks
  ``Host``/``Origin`` (403) and the bearer token (401) at the upgrade: ``Authorization:
  Bearer <token>``, or, for browsers, which cannot set headers on a WebSocket, an offered
  subprotocol ``bearer.<token>`` beside ``openenv.v1+proto``. TLS is the listener's (``wss://``).
* **Limits.** A message over the listener's ``max_message_bytes`` is refused by the WebSocket
  layer before it is buffered: the server closes with 1009 (its request id cannot be read
  without reading it). Bytes that are not a ``SessionRequest`` are answered in band
  (``INVALID_ARGUMENT``, non-fatal, matched by request id when field 1 leads), as over gRPC.
  A reply over the limit is replaced by an in-band ``RESOURCE_EXHAUSTED``.
* **Half-close.** An empty binary message ends the client's input, as a gRPC half-close
  does: every request sent before it is answered, then the server ends the stream (a
  WebSocket has no half-close of its own; its close frame ends both directions). An
  empty ``SessionRequest`` (no id, no kind) is therefore not expressible on this transport,
  and needs not be: the engine could only refuse it.
* **Text messages** are not part of the transport: each is answered in band with a
  non-fatal ``INVALID_ARGUMENT`` (request id 0); the session goes on.
* **How a session ends.** After a close request's answer or a fatal error answer the server
  closes with 1000. When the server ends a stream with a status instead (handshake deadline,
  session ended by the server, idle reaper, drain, taken over by a resumed stream) it closes
  with ``4000 + code`` (e.g. 4004 ``DEADLINE_EXCEEDED``, 4010 ``ABORTED``; :func:`close_code`),
  the reason being the status message cut to 123 bytes (RFC 6455's bound). Nothing else is
  sent: as over gRPC, where such a stream ends with a status and no message (a stream that
  sent nothing is never answered: the certifier checks it), and every WebSocket API, browsers'
  included, exposes the close code and reason. A client that
  drops the socket is, to the engine, a client whose input ended (a resumable session is
  parked for its grace period).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, NoReturn

from openenv.client.urls import BINARY_PATH, BINARY_SUBPROTOCOL
from openenv.engine import Engine, Incoming, Undecodable, bounded_serializer, tolerant_parse
from openenv.errors import ErrorCode
from openenv.json_protocol import frames
from openenv.v1 import environment_pb2

log = logging.getLogger("openenv.http")

__all__ = [
    "PATH",
    "SUBPROTOCOL",
    "TEXT_MESSAGE",
    "Ended",
    "close_code",
    "close_reason",
    "decode",
    "peer_name",
    "run_session",
    "serve_binary",
    "subprotocol_refusal",
]

PATH = BINARY_PATH
"""The route of the binary transport on the HTTP listener (``/v1/session``)."""

SUBPROTOCOL = BINARY_SUBPROTOCOL
"""The WebSocket subprotocol both sides must agree on (``openenv.v1+proto``): contract major
version 1, protobuf messages."""

CLOSE_CODE_BASE = 4000
"""A stream ended by the server with a status closes with ``CLOSE_CODE_BASE + code``."""

_parse = tolerant_parse(environment_pb2.SessionRequest.FromString, environment_pb2.SessionRequest.DESCRIPTOR)


TEXT_MESSAGE = Undecodable("a text message on the binary transport: send each SessionRequest as a binary message", 0)
"""What a text message is to the engine: answered in band (``INVALID_ARGUMENT``, request id 0),
the session goes on."""


def close_code(code: ErrorCode | int) -> int:
    """The WebSocket close code of a stream the server ended with status ``code``."""
    return CLOSE_CODE_BASE + int(code)


def decode(data: bytes) -> Incoming:
    """What one binary message is to the engine: None for the empty message (the client's
    half-close: no more requests, answers still wanted), else the parsed ``SessionRequest``, or
    an :class:`~openenv.engine.Undecodable` the engine answers in band."""
    if not data:
        return None
    return _parse(data)  # type: ignore[no-any-return]


def subprotocol_refusal(offered: Sequence[str]) -> bytes | None:
    """The body of the HTTP 400 refusing an upgrade that does not offer :data:`SUBPROTOCOL`
    (``offered``: the client's subprotocols); None when it does."""
    if SUBPROTOCOL in offered:
        return None
    why = f"the binary session transport needs the WebSocket subprotocol {SUBPROTOCOL!r}"
    return frames.dumps({"detail": why, "status": "FAILED_PRECONDITION"}).encode()


class Ended(Exception):
    """Raised by a binary stream's ``abort``: the stream was ended with a status (its close
    frame is sent); :func:`run_session` takes it as the end of the stream."""


def peer_name(host: Any, port: Any) -> str:
    """The engine's peer string (gRPC's form) of a client address."""
    if not host:
        return ""
    return f"ipv6:[{host}]:{port}" if ":" in str(host) else f"ipv4:{host}:{port}"


def _peer(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    return peer_name(client[0], client[1]) if client else ""


async def run_session(engine: Engine, stream: Any) -> bool:
    """Serve ``stream`` (a binary stream of either listener: an engine
    :class:`~openenv.engine.Stream` with a ``gone`` flag, set when a write found the client gone)
    to its end. True when the session is over normally (close answered, fatal error answered,
    input ended): the caller then closes with 1000 if the socket is still open; False when the
    stream was ended with a status (its close frame already sent) or the client went away.
    Raises CancelledError when the server is stopping."""
    try:
        await engine.serve(stream)
    except asyncio.CancelledError:
        if not stream.gone:
            raise  # the server is stopping
        return False
    except Ended:
        return False
    except OSError:  # the connection broke while answering: the engine has freed or parked the session
        return False
    except Exception as e:  # uvicorn's ClientDisconnected and the like: the client went away
        if type(e).__name__ != "ClientDisconnected":
            log.warning("binary session stream failed", exc_info=True)
        return False
    return True


class _BinaryStream:
    """An accepted ASGI WebSocket as the engine's :class:`~openenv.engine.Stream`."""

    __slots__ = ("_closed", "_receive", "_scope", "_send", "_serialize", "gone")
    encode_result = None  # the engine encodes results as protobuf
    relayed = False  # a client's own stream (not relayed by a sibling worker)

    def __init__(self, scope: dict[str, Any], receive: Any, send: Any, limit: int) -> None:
        self._scope, self._receive, self._send = scope, receive, send
        self._serialize = bounded_serializer(limit)
        self._closed = False
        self.gone = False  # a write found the client gone (see write)

    async def read(self) -> Incoming:
        while True:
            msg = await self._receive()
            kind = msg["type"]
            if kind == "websocket.receive":
                data = msg.get("bytes")
                # A text frame is not this transport's: answered in band, the session goes on.
                return decode(data) if data is not None else TEXT_MESSAGE
            if kind == "websocket.disconnect":
                self._closed = True
                return None

    async def write(self, response: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        data = self._serialize(response)
        try:
            await self._send({"type": "websocket.send", "bytes": data})
        except Exception:  # noqa: BLE001 - uvicorn's ClientDisconnected, a reset socket
            # The client went away while its request ran: to the engine that is a cancelled
            # stream, as grpc.aio cancels the handler of a dropped call, so a resumable
            # session is parked (RFC 0006), not closed as a failed stream would be.
            self.gone = self._closed = True
            raise asyncio.CancelledError from None

    async def abort(self, code: ErrorCode, message: str) -> NoReturn:
        if not self._closed:
            try:
                await self._send({"type": "websocket.close", "code": close_code(code), "reason": close_reason(message)})
            except Exception:  # noqa: BLE001 - the client is already gone: nothing to tell it
                pass
            self._closed = True
        raise Ended(message)

    def peer(self) -> str:
        return _peer(self._scope)

    def metadata(self) -> Sequence[tuple[str, str]]:
        return tuple((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in self._scope.get("headers", ()))


def close_reason(message: str) -> str:
    """A close reason: at most 123 UTF-8 bytes (RFC 6455), cut on a character boundary."""
    return message.encode()[:123].decode(errors="ignore")


async def serve_binary(engine: Engine, limit: int, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Serve one WebSocket upgrade on :data:`PATH` (see the module docstring); the guard has
    already admitted it (Origin, token)."""
    offered = [p.strip() for p in scope.get("subprotocols") or () if isinstance(p, str)]
    body = subprotocol_refusal(offered)
    if body is not None:
        if "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1002, "reason": f"needs the subprotocol {SUBPROTOCOL}"})
        return
    msg = await receive()
    if msg["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept", "subprotocol": SUBPROTOCOL})
    stream = _BinaryStream(scope, receive, send, limit)
    if await run_session(engine, stream) and not stream._closed:
        try:  # the session is over (close answered, fatal error): a normal close
            await send({"type": "websocket.close", "code": 1000})
        except Exception:  # noqa: BLE001 - the client went away meanwhile
            pass
