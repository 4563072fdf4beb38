"""OpenEnv's JSON protocol as a transport: sessions over ``/ws`` frames, documents over HTTP.

:class:`WsWire` reaches the HTTP side of a server (``http(s)://HOST:PORT`` or
``ws(s)://HOST:PORT``; docs/bridge.md): ``GET /openenv/info`` (openenv servers) or
``/metadata`` + ``/schema`` (stock OpenEnv servers) describe the environment, ``GET
/health`` is its health, and each :class:`WsSession` is one WebSocket on ``/ws``.

A :class:`WsSession` offers the session interface of the gRPC transport
(:class:`~openenv_conformance.transport.base.SessionLike`): requests are
``openenv.v1.SessionRequest`` messages, answers ``SessionResponse`` messages (or the
:class:`~openenv_conformance.transport.base.StreamEnd` of the socket), so the checks run
unchanged. Underneath, every request becomes an OpenEnv frame and every reply frame is
translated back, and nothing is made up on the client side:

* the translation mechanics are openenv's (:class:`openenv.json_protocol.frames.FrameTranslator`,
  payloads as their canonical JSON through :class:`openenv.json_protocol.payloads.PayloadJson`, driven
  by the advertised descriptors); what the certifier judges by is its own
  (:mod:`openenv_conformance.tables`): every reply is checked against the documented frame
  shapes before it is translated (a malformed reply is a :class:`Violation`), and error
  frames and JSON-RPC errors are read with the restated tables;
* the handshake is the connection plus openenv's ``openenv.hello`` frame (the session id and
  the binary ``EnvironmentInfo``); a stock server answers it ``UNKNOWN_TYPE`` and the session
  is opened without them;
* against openenv servers every frame carries a correlation ``"id"`` that the reply must
  echo (replies come in request order: a reply under another id is a :class:`Violation`);
  the replies are the *extended* shapes (time steps with ``terminated``, ``truncated``,
  ``episode_id``, ``step_count``; state with ``status``). Against stock servers frames carry
  no id, replies are matched in order, and time steps and states carry only what the server
  sends (the translator's stand-ins for what a stock server does not send are not kept);
* tool-call actions travel as OpenEnv's ``call_tool`` shape; ``list_tools``/``call_tool`` as
  ``mcp`` frames (``tools/list``, ``tools/call``);
* ``close`` has no reply in OpenEnv's protocol: the session answers ``CloseResponse`` itself
  once the frame is written, and the server's closing of the socket is the end of the
  session (close code 1000 reads as status ``OK``);
* error frames (and JSON-RPC errors) become ``Status`` with the code the frame names
  (``data.status``; else the ``WSErrorCode`` read by the error table) and its ``fatal``.

Requests that have no frame (a request with no kind, a second handshake, vectorised
sessions, raw bytes) raise :class:`UnsupportedRequest`: checks that need them declare the
``grpc`` feature and are skipped on this transport.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import ipaddress
import itertools
import time
from collections.abc import Awaitable
from typing import Any, TypeVar, cast
from urllib.parse import urlencode, urlsplit

import grpc
import httpx
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from openenv.client.urls import split_url
from openenv.errors import EnvError, Unimplemented
from openenv.json_protocol.frames import FrameTranslator, Outgoing, info_from_stock, parse_hello
from openenv.json_protocol.jsontext import dumps, loads
from openenv.json_protocol.payloads import parse_info
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import error_pb2, rubric_pb2, tool_pb2
from openenv.values import from_struct, to_struct, to_value
from openenv_conformance import tables
from openenv_conformance.errors import Violation
from openenv_conformance.strategies import NO_JSON, Action
from openenv_conformance.transport.base import (
    EPISODE_FIELDS,
    FRAMES,
    PROTOCOL_VERSION,
    Answer,
    NoAnswer,
    RequestBuilder,
    StreamEnd,
    refusal,
)

__all__ = ["UnsupportedRequest", "WsSession", "WsWire", "parse_info"]

T = TypeVar("T")

_STATUS_NAMES = {n.removeprefix("EPISODE_STATUS_"): v for n, v in pb.EpisodeStatus.items()}


class UnsupportedRequest(Exception):
    """The request has no OpenEnv frame (a check needing it must require ``grpc``)."""


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _compact(v: Any, limit: int = 200) -> str:
    try:
        s = dumps(v)
    except TypeError:
        s = repr(v)
    return s if len(s) <= limit else s[:limit] + "..."


def _code(name: str) -> error_pb2.ErrorCode:
    """The number of a code of the error table, as the contract's enum (an open enum: its
    values are numbers)."""
    return cast(error_pb2.ErrorCode, tables.ERROR_CODES[name])


def _status(data: Any) -> error_pb2.Status:
    """The ``Status`` of an error frame's ``data``: the code its ``status`` names, else the one
    its ``WSErrorCode`` stands for (:data:`~openenv_conformance.tables.FROM_WS_CODE`)."""
    data = data if isinstance(data, dict) else {}
    out = error_pb2.Status(message=str(data.get("message", "")))
    name = data.get("status")
    mapped = tables.FROM_WS_CODE.get(str(data.get("code", "")))
    if isinstance(name, str) and name in tables.ERROR_CODES:
        out.code = _code(name)
    elif mapped is not None:
        out.code = _code(mapped[0])
    if "fatal" in data:
        out.fatal = bool(data["fatal"])
    elif mapped is not None:
        out.fatal = mapped[1]
    return out


def _rpc_status(err: Any) -> error_pb2.Status:
    """The ``Status`` of a JSON-RPC error (``data.status`` names the code on openenv servers;
    else :func:`~openenv_conformance.tables.rpc_status_name`). Never fatal."""
    err = err if isinstance(err, dict) else {}
    data = err.get("data")
    message = str(err.get("message", ""))
    if isinstance(data, dict) and isinstance(data.get("status"), str):
        name = data["status"]
    else:
        name = tables.rpc_status_name(err.get("code"), message)
    return _status({"message": message, "status": name, "fatal": False})


@dataclasses.dataclass
class _Pending:
    """A request written and not yet answered: ``out`` is its translation (None for a raw
    frame, whose reply is read as an error or an answer with no kind)."""

    request_id: int
    kind: str
    frame_id: int | None
    out: Outgoing | None = None


@dataclasses.dataclass
class _NotJson:
    raw: Any


class _Channel:
    """A group of WebSocket connections closed together (the gRPC channel's counterpart)."""

    def __init__(self) -> None:
        self.sessions: list[WsSession] = []


class WsWire:
    """Sessions and documents of one HTTP/WebSocket target. Every blocking call is bounded
    by ``timeout`` seconds (:class:`NoAnswer`). Not thread-safe: use from one thread."""

    kind = "http"

    def __init__(self, url: str, *, timeout: float = 10.0, token: str | None = None) -> None:
        self.token = token
        self.ws_url, self.http_url = split_url(url)
        self.url = url
        self.timeout = timeout
        self.loop = asyncio.new_event_loop()
        self.sessions: list[WsSession] = []
        self.extended: bool | None = None  # an openenv server (GET /openenv/info answers); set by get_info
        self.info: pb.EnvironmentInfo | None = None
        self._http = httpx.Client(
            timeout=timeout,
            trust_env=not _loopback(self.http_url),
            headers={"Authorization": f"Bearer {token}"} if token else None,
        )
        self.channel = _Channel()

    @property
    def features(self) -> frozenset[str]:
        """``frames``, plus ``episode_fields`` for openenv servers (see :mod:`~openenv_conformance.transport`)."""
        return frozenset({FRAMES, EPISODE_FIELDS} if self.extended else {FRAMES})

    # -- plumbing

    def run(self, aw: Awaitable[T], timeout: float | None = None, what: str = "the call") -> T:
        """Run ``aw`` on the wire's loop, for at most ``timeout`` seconds."""
        t = self.timeout if timeout is None else timeout

        async def bounded() -> T:
            return await asyncio.wait_for(aw, t)

        try:
            return self.loop.run_until_complete(bounded())
        except TimeoutError:
            raise NoAnswer(f"no answer to {what} within {t:g} s") from None

    def new_channel(self) -> _Channel:
        """A group of connections that :meth:`close_channel` drops at once."""
        return _Channel()

    def close_channel(self, channel: _Channel) -> None:
        """Drop every connection of ``channel`` abruptly (no close frame)."""
        for s in list(channel.sessions):
            s.cancel()

    def close(self) -> None:
        """End every session, close the HTTP client and the loop."""
        for s in list(self.sessions):
            s.cancel()
        self._http.close()
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.wait(pending, timeout=5))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    # -- documents

    def get(self, path: str, timeout: float | None = None) -> tuple[int, Any]:
        """(HTTP status, parsed JSON body or None) of ``GET path``; :class:`NoAnswer` when the
        server cannot be reached."""
        t = self.timeout if timeout is None else timeout
        try:
            r = self._http.get(self.http_url + path, timeout=t)
        except httpx.HTTPError as e:
            raise NoAnswer(f"GET {self.http_url}{path}: {type(e).__name__}: {e}") from None
        try:
            body = r.json()
        except ValueError:
            body = None
        return r.status_code, body

    def get_info(self, timeout: float | None = None) -> pb.EnvironmentInfo:
        """``GET /openenv/info`` (an openenv server); a stock OpenEnv server is described from
        ``/metadata`` and ``/schema`` (JSON payloads), as openenv's client does."""
        status, doc = self.get("/openenv/info", timeout)
        refused = refusal(status, "GET /openenv/info")
        if refused is not None:  # not a stock server: one that wants a token
            raise refused
        if status == 200 and isinstance(doc, dict):
            try:
                info = parse_info(doc)
            except (json_format.ParseError, TypeError, ValueError) as e:
                raise Violation(f"GET /openenv/info is not an openenv.v1.EnvironmentInfo: {e}") from None
            self.extended = True
        else:
            info = self._stock_info(timeout)
            self.extended = False
        self.info = info
        return info

    def _stock_info(self, timeout: float | None) -> pb.EnvironmentInfo:
        status, metadata = self.get("/metadata", timeout)
        status_s, schema = self.get("/schema", timeout)
        info = info_from_stock(metadata if status == 200 else None, schema if status_s == 200 else None)
        # Tools: OpenEnv's JSON-RPC tools/list on POST /mcp (an environment without tools
        # answers an error: "Environment does not support MCP").
        t = self.timeout if timeout is None else timeout
        try:
            r = self._http.post(
                self.http_url + "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": tables.RPC_METHODS["list_tools"]},
                timeout=t,
            )
            listed = r.json().get("result") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            listed = None
        info.capabilities.tools = isinstance(listed, dict) and isinstance(listed.get("tools"), list)
        return info

    def health(self, service: str = "", timeout: float | None = None) -> str:
        """``SERVING`` when ``GET /health`` answers 200 ``{"status": "healthy"}``,
        ``NOT_SERVING`` for 503, else ``"<what happened>"``."""
        try:
            status, body = self.get("/health", timeout)
        except NoAnswer:
            return "<UNAVAILABLE>"
        if status == 200 and isinstance(body, dict) and body.get("status") == "healthy":
            return "SERVING"
        if status == 503:
            return "NOT_SERVING"
        if status == 404:
            return "<UNIMPLEMENTED: no /health>"
        return f"<HTTP {status}: {_compact(body)}>"

    # -- sessions

    def session(self, channel: _Channel | None = None) -> WsSession:
        """A new session (not connected until its handshake)."""
        s = WsSession(self, channel or self.channel)
        self.sessions.append(s)
        return s


class WsSession(RequestBuilder):
    """One WebSocket session, with the interface of the gRPC transport's sessions.

    The handshake connects to ``/ws`` (options and client name in the query) and says hello;
    there is no version negotiation over WebSocket (``protocol_version`` is not sent).
    """

    def __init__(self, wire: WsWire, channel: _Channel) -> None:
        super().__init__()
        self.wire = wire
        self.channel = channel
        channel.sessions.append(self)
        self._frame_ids = itertools.count(1)
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._reader: asyncio.Task[None] | None = None
        self.ws: ClientConnection | None = None
        self.extended = wire.extended is not False
        self._translator = self._new_translator()

    # -- plumbing

    def _new_translator(self) -> FrameTranslator:
        """openenv's translation for this session (its payload types and its server's shape)."""
        return FrameTranslator(self.info or self.wire.info or pb.EnvironmentInfo(), extended=self.extended)

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                try:
                    self._inbox.put_nowait(loads(raw))
                except ValueError:
                    self._inbox.put_nowait(_NotJson(raw))
            end = self._end_of(ws)
        except ConnectionClosed:
            end = self._end_of(ws)
        except asyncio.CancelledError:
            end = StreamEnd(grpc.StatusCode.CANCELLED, "cancelled by the client")
        except Exception as e:  # noqa: BLE001 - any transport failure ends the session
            end = StreamEnd(grpc.StatusCode.UNAVAILABLE, f"the WebSocket failed: {type(e).__name__}: {e}")
        self._inbox.put_nowait(end)

    @staticmethod
    def _end_of(ws: ClientConnection) -> StreamEnd:
        code = ws.close_code if ws.close_code is not None else 1006
        reason = ws.close_reason or ""
        return StreamEnd(
            tables.close_status(code), f"WebSocket closed with code {code}" + (f": {reason}" if reason else "")
        )

    def _finish(self, end: StreamEnd) -> None:
        self.end = end
        self._inbox.put_nowait(end)

    # -- raw operations

    def send(self, request: pb.SessionRequest | bytes) -> bool:
        """Write the frame of one request; False when the session no longer accepts writes.
        Raises :class:`UnsupportedRequest` for a request that has no frame."""
        if isinstance(request, (bytes, bytearray)):
            raise UnsupportedRequest("raw bytes have no OpenEnv frame")
        if self.end is not None:
            return False
        kind = request.WhichOneof("kind")
        if kind == "handshake":
            if self.ws is not None:
                raise UnsupportedRequest("a second handshake has no OpenEnv frame (the connection is the handshake)")
            return self._connect(request)
        if self.ws is None:
            raise UnsupportedRequest(
                f"{kind or 'a request with no kind'} before the handshake: over a WebSocket the "
                "connection is the handshake"
            )
        try:
            out = self._translator.encode(request)
        except Unimplemented as e:
            raise UnsupportedRequest(e.message) from None
        fid = self._next_frame_id() if out.reply else None
        return self._write(dict(out.frame), _Pending(request.request_id, kind or "", fid, out))

    def _next_frame_id(self) -> int | None:
        return next(self._frame_ids) if self.extended else None

    def _write(self, frame: dict[str, Any], pending: _Pending) -> bool:
        if self.ws is None:
            raise UnsupportedRequest(f"{pending.kind} before the handshake")
        if pending.frame_id is not None:
            frame["id"] = pending.frame_id
        try:
            self.wire.run(self.ws.send(dumps(frame)), what="a write")
        except ConnectionClosed:
            return False
        self._pending.append(pending)
        return True

    def _connect(self, request: pb.SessionRequest) -> bool:
        hs = request.handshake
        if hs.num_envs > 1:
            raise UnsupportedRequest("vectorised sessions (num_envs > 1) are gRPC only")
        query = {"client_name": hs.client_name or "openenv-certify"}
        options = from_struct(hs.options) if hs.HasField("options") else {}
        if options:
            query["options"] = dumps(options)
        url = self.wire.ws_url + ("&" if "?" in self.wire.ws_url else "?") + urlencode(query)
        kw: dict[str, Any] = {
            "open_timeout": self.wire.timeout,
            "max_size": None,
            "ping_interval": None,
            "compression": None,
            "close_timeout": 2,
        }
        if _loopback(url):
            kw["proxy"] = None
        if self.wire.token:
            kw["additional_headers"] = {"Authorization": f"Bearer {self.wire.token}"}

        async def open_socket() -> ClientConnection:
            return await connect(url, **kw)

        try:
            ws = self.wire.run(open_socket(), self.wire.timeout + 1, "the WebSocket handshake")
        except NoAnswer:
            raise
        except Exception as e:  # noqa: BLE001 - refused, reset, HTTP error: the session never opened
            self._finish(
                StreamEnd(grpc.StatusCode.UNAVAILABLE, f"cannot open {self.wire.ws_url}: {type(e).__name__}: {e}")
            )
            return False
        self.ws = ws
        self._reader = self.wire.loop.create_task(self._read(ws))
        fid = next(self._frame_ids)
        return self._write({"type": tables.HELLO}, _Pending(request.request_id, "handshake", fid))

    def recv(self, timeout: float | None = None) -> Answer:
        """The answer to the oldest unanswered request, or the :class:`StreamEnd` (sticky)
        once the socket is closed. A frame nobody asked for is returned as it comes."""
        if self._pending and self._pending[0].kind == "close":
            p = self._pending.popleft()
            return pb.SessionResponse(request_id=p.request_id, close=pb.CloseResponse())
        item = self.wire.run(self._inbox.get(), timeout, what="a request on the session")
        self.received_at = time.monotonic()
        if isinstance(item, StreamEnd):
            self.end = item
            self._pending.clear()
            self._inbox.put_nowait(item)
            return item
        if isinstance(item, _NotJson):
            raise Violation(f"the server sent a frame that is not JSON: {item.raw[:200]!r}")
        if not self._pending:
            return self._unsolicited(item)
        return self._answer(self._pending.popleft(), item)

    def wait_end(self, timeout: float | None = None) -> tuple[StreamEnd, list[pb.SessionResponse]]:
        """Read until the socket closes: (its end, the answers read meanwhile)."""
        extra: list[pb.SessionResponse] = []
        t = self.wire.timeout if timeout is None else timeout
        deadline = self.wire.loop.time() + t
        while True:
            left = deadline - self.wire.loop.time()
            if left <= 0:
                raise NoAnswer(f"the WebSocket was not closed within {t:g} s")
            item = self.recv(left)
            if isinstance(item, StreamEnd):
                return item, extra
            extra.append(item)

    def half_close(self) -> None:
        """No such thing on a WebSocket: nothing is sent."""

    def cancel(self) -> None:
        """Drop the connection abruptly (no close frame: the client vanished)."""
        ws, self.ws = self.ws, None
        if ws is not None and ws.transport is not None:
            ws.transport.abort()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
        if self.end is None:
            self.end = StreamEnd(grpc.StatusCode.CANCELLED, "cancelled by the client")
            self._inbox.put_nowait(self.end)
        if not self.wire.loop.is_closed():
            try:
                self.wire.run(asyncio.sleep(0), what="dropping the connection")
            except RuntimeError:  # the loop is running (cancel from inside the loop): it will catch up
                pass
        if self in self.wire.sessions:
            self.wire.sessions.remove(self)
        if self in self.channel.sessions:
            self.channel.sessions.remove(self)

    def shutdown(self, timeout: float = 3.0) -> None:
        """End the session politely (OpenEnv's close frame, then wait for the socket to
        close), else drop it."""
        try:
            if self.end is None and self.ws is not None:
                if self.opened:
                    self.send(self.request(close=pb.CloseRequest()))
                self.wait_end(timeout)
        except (Violation, EnvError):
            pass
        finally:
            self.cancel()

    # -- reading replies: the documented shapes first (Violations), then openenv's translation

    def _unsolicited(self, frame: Any) -> pb.SessionResponse:
        if isinstance(frame, dict) and frame.get("type") == tables.ERROR_TYPE:
            return pb.SessionResponse(error=_status(frame.get("data")))
        return pb.SessionResponse()  # described as "an answer with no kind set"

    def _answer(self, p: _Pending, frame: Any) -> pb.SessionResponse:
        if not isinstance(frame, dict):
            raise Violation(f"the reply to {p.kind} is not a JSON object: {_compact(frame)}")
        typ, data, fid = frame.get("type"), frame.get("data"), frame.get("id")
        if self.extended and p.frame_id is not None:
            if fid is not None and fid != p.frame_id:
                raise Violation(
                    f"the reply to frame id {p.frame_id} ({p.kind}) carries id {fid!r}: replies must come "
                    "in request order under their frame's id"
                )
            if fid is None and typ != tables.ERROR_TYPE:
                raise Violation(f"the {typ!r} reply to frame id {p.frame_id} ({p.kind}) does not echo its id")
        resp = pb.SessionResponse(request_id=p.request_id)
        if p.kind == "handshake":
            return self._handshake_answer(resp, frame)
        if typ == tables.ERROR_TYPE:
            resp.error.CopyFrom(_status(data))
            return resp
        if not isinstance(data, dict):
            raise Violation(f"the {typ!r} reply to {p.kind} has no data object: {_compact(frame)}")
        if p.out is None:  # a raw frame: an error, or an answer with no kind
            return resp
        want = tables.REPLY_TYPE.get(str(p.out.frame.get("type")))
        if typ != want:
            if want == "mcp":
                raise Violation(f"a {typ!r} frame answered an mcp frame ({p.kind})")
            raise Violation(
                f"a {typ!r} frame answered {p.kind} (expected a{'n' if want == 'observation' else ''} {want} frame)"
            )
        if p.kind in ("reset", "step"):
            self._check_time_step(data)
        elif p.kind == "state":
            self._check_state(data)
        elif data.get("error") is not None:  # list_tools, call_tool: a JSON-RPC error
            resp.error.CopyFrom(_rpc_status(data["error"]))
            return resp
        elif p.kind == "list_tools":
            self._check_tools(data.get("result"))
        else:
            self._check_tool_result(data.get("result"))
        return self._translate(p.out, frame, data)

    def _handshake_answer(self, resp: pb.SessionResponse, frame: dict[str, Any]) -> pb.SessionResponse:
        typ, data = frame.get("type"), frame.get("data")
        if typ == tables.HELLO and isinstance(data, dict):
            try:
                hello = parse_hello(frame)
            except (DecodeError, TypeError, ValueError) as e:  # base64 or protobuf decoding
                raise Violation(f"openenv.hello: info_b64 is not an EnvironmentInfo: {e}") from None
            if hello is None:  # parse_hello answers None only for an error frame
                raise Violation("openenv.hello was answered as an error")
            hs = resp.handshake
            hs.session_id = str(data.get("session_id") or "")
            hs.protocol_version = str(data.get("protocol_version") or "")
            hs.info.CopyFrom(hello[1])
            self.extended = True
        elif (
            typ == tables.ERROR_TYPE
            and isinstance(data, dict)
            and data.get("code") in tables.STOCK_HELLO_CODES
            and not data.get("fatal")
        ):
            # a stock OpenEnv server: it does not know openenv.hello, the session is open
            self.extended = False
            resp.handshake.protocol_version = PROTOCOL_VERSION
            resp.handshake.info.CopyFrom(self.wire.info or pb.EnvironmentInfo())
        elif typ == tables.ERROR_TYPE:
            resp.error.CopyFrom(_status(data))
            return resp
        else:
            raise Violation(f"the first reply on /ws is a {typ!r} frame, neither openenv.hello nor an error")
        self.opened = True
        self.info = resp.handshake.info
        self.session_id = resp.handshake.session_id
        self._translator = self._new_translator()
        return resp

    def _check_time_step(self, data: dict[str, Any]) -> None:
        """An observation reply's ``data`` has the documented shape (docs/bridge.md "/ws frames")."""
        reward = data.get("reward")
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
            raise Violation(f"reward {reward!r} is not a number")
        if self.extended:
            done = data.get("done")
            terminated, truncated = data.get("terminated", False), data.get("truncated", False)
            if not isinstance(terminated, bool) or not isinstance(truncated, bool):
                raise Violation(f"terminated {terminated!r} / truncated {truncated!r} are not booleans")
            if done is not None and bool(done) != (terminated or truncated):
                raise Violation(
                    f"done={done!r} but terminated={terminated}, truncated={truncated}: done must be "
                    "terminated or truncated"
                )
            eid, count = data.get("episode_id", ""), data.get("step_count", 0)
            if not isinstance(eid, str) or isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise Violation(f"episode_id {eid!r} / step_count {count!r}: expected a string and an integer >= 0")
        meta = data.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise Violation(f"metadata {_compact(meta)} is not an object")
        if data.get("reward_breakdown") is not None:
            try:
                json_format.ParseDict(data["reward_breakdown"], rubric_pb2.RubricScore(), ignore_unknown_fields=True)
            except (json_format.ParseError, TypeError, ValueError) as e:
                raise Violation(f"reward_breakdown is not a RubricScore: {e}") from None

    def _check_state(self, data: dict[str, Any]) -> None:
        """A state reply's ``data`` has the documented shape."""
        count, status = data.get("step_count", 0), data.get("status")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise Violation(f"state step_count {count!r} is not an integer >= 0")
        if self.extended and not (isinstance(status, str) and status in _STATUS_NAMES):
            raise Violation(f"state status {status!r} is not an EpisodeStatus name")

    @staticmethod
    def _check_tools(result: Any) -> None:
        """A ``tools/list`` result lists MCP tool objects."""
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            raise Violation(f"tools/list result has no tools list: {_compact(result)}")
        for t in result["tools"]:
            if not isinstance(t, dict):
                raise Violation(f"tools/list lists a non-object: {_compact(t)}")
            for key in ("inputSchema", "input_schema", "outputSchema", "output_schema"):
                if t.get(key) is not None and not isinstance(t[key], dict):
                    raise Violation(f"tool {t.get('name')!r}: {key} {_compact(t[key])} is not an object")

    @staticmethod
    def _check_tool_result(result: Any) -> None:
        """A ``tools/call`` result is an MCP ``CallToolResult``."""
        if not isinstance(result, dict):
            raise Violation(f"tools/call result is not an object: {_compact(result)}")
        sc = result.get("structuredContent", result.get("structured_content"))
        if sc is not None and not isinstance(sc, dict):
            raise Violation(f"tools/call structuredContent is not an object: {_compact(sc)}")

    def _translate(self, out: Outgoing, frame: dict[str, Any], data: dict[str, Any]) -> pb.SessionResponse:
        """openenv's translation of a checked reply, keeping only what the server sent."""
        kind = out.request.WhichOneof("kind")
        # A stock server's tool-call step observations stay the JSON the server sent.
        out = dataclasses.replace(out, tool="")
        try:
            resp = self._translator.decode(out, frame)
        except (json_format.ParseError, TypeError, ValueError) as e:
            raise Violation(
                f"the {frame.get('type')!r} reply to {kind} cannot be read: {type(e).__name__}: {e}"
            ) from None
        if kind in ("reset", "step", "state") and resp.WhichOneof("kind") == "error":
            part, value = ("state", data.get("state")) if kind == "state" else ("observation", data.get("observation"))
            raise Violation(f"the {part} {_compact(value)} does not fit the declared {part} type: {resp.error.message}")
        if kind == "list_tools":
            self._tools_as_sent(data, resp.list_tools)
        elif kind == "state":
            self._state_as_sent(data, resp.state)
        elif kind in ("reset", "step") and not self.extended:
            self._time_step_as_sent(data, resp.reset.time_step if kind == "reset" else resp.step.time_step)
        return resp

    # The translator fills in what a stock server does not send (a locally counted episode id
    # and step count, an inferred episode status, a default input schema) and reads an empty
    # observation body as none: the certifier judges only what the server sent.

    @staticmethod
    def _time_step_as_sent(data: dict[str, Any], ts: pb.TimeStep) -> None:
        ts.ClearField("episode_id")
        ts.ClearField("step_count")
        body = data.get("observation")
        if (
            isinstance(body, dict)
            and not ts.HasField("observation")
            and not {k: v for k, v in body.items() if k != "metadata"}
        ):
            to_value({}, ts.observation.json)

    @staticmethod
    def _state_as_sent(data: dict[str, Any], out: pb.StateResponse) -> None:
        eid, status = data.get("episode_id"), data.get("status")
        out.episode_id = "" if eid is None else str(eid)
        if isinstance(status, str) and status in _STATUS_NAMES:
            out.status = cast(pb.EpisodeStatus, _STATUS_NAMES[status])  # an open enum: its values are numbers
        else:
            out.ClearField("status")

    @staticmethod
    def _tools_as_sent(data: dict[str, Any], out: tool_pb2.ListToolsResponse) -> None:
        for t, pt in zip(data["result"]["tools"], out.tools, strict=True):
            if not t.get("inputSchema", t.get("input_schema")):
                pt.ClearField("input_schema")
            notes = t.get("annotations")
            if isinstance(notes, dict) and notes and not pt.HasField("annotations"):
                to_struct(notes, pt.annotations)  # MCP's Tool.annotations (RFC 0010 reads them)

    # -- requests

    def step(self, action: Any, timeout_s: float | None = None) -> Answer:
        """``action``: a Payload, or an Action (whose raw ``json``, when set, is sent as is)."""
        raw = action.json if isinstance(action, Action) else NO_JSON
        if raw is NO_JSON:
            return super().step(action, timeout_s)
        if self.end is not None:
            return self.end
        if self.ws is None:
            raise UnsupportedRequest("step before the handshake")
        frame: dict[str, Any] = {"type": "step", "data": raw}
        if timeout_s is not None:
            frame["timeout_s"] = timeout_s
        rid = self.next_id()
        out = Outgoing(pb.SessionRequest(request_id=rid, step=pb.StepRequest()), frame)
        if not self._write(frame, _Pending(rid, "step", self._next_frame_id(), out)):
            return self.recv() if self.end is None else self.end
        return self.recv()

    def state(self, env_id: int | None = None) -> Answer:
        if env_id:
            raise UnsupportedRequest("state(env_id) addresses vectorised sessions, which are gRPC only")
        return super().state()

    def frame(self, frame: dict[str, Any]) -> Answer:
        """Send any frame (with the session's correlation id) and translate its reply as an
        error or an answer with no kind (for requests only this protocol has)."""
        if self.ws is None:
            raise UnsupportedRequest("a frame before the handshake")
        if not self._write(dict(frame), _Pending(self.next_id(), "raw", self._next_frame_id())):
            return self.recv() if self.end is None else self.end
        return self.recv()
