"""OpenEnv's JSON protocol as a transport: sessions over ``/ws`` frames, documents over HTTP.

:class:`WsWire` reaches the HTTP side of a server (``http(s)://HOST:PORT`` or
``ws(s)://HOST:PORT``; docs/bridge.md): ``GET /openenv/info`` (openenv servers) or
``/metadata`` + ``/schema`` (stock OpenEnv servers) describe the environment, ``GET
/health`` is its health, and each :class:`WsSession` is one WebSocket on ``/ws``.

A :class:`WsSession` offers the session interface of :class:`openenv_conformance.wire.Session`:
requests are ``openenv.v1.SessionRequest`` messages, answers ``SessionResponse`` messages (or
the :class:`~openenv_conformance.wire.StreamEnd` of the socket), so the checks run unchanged.
Underneath, every request becomes an OpenEnv frame and every reply frame is translated back,
and nothing is made up on the client side:

* the handshake is the connection plus openenv's ``openenv.hello`` frame (the session id and
  the binary ``EnvironmentInfo``); a stock server answers it ``UNKNOWN_TYPE`` and the session
  is opened without them;
* against openenv servers every frame carries a correlation ``"id"`` that the reply must
  echo (replies come in request order: a reply under another id is a :class:`Violation`);
  the replies are the *extended* shapes (time steps with ``terminated``, ``truncated``,
  ``episode_id``, ``step_count``; state with ``status``). Against stock servers frames carry
  no id, replies are matched in order, and time steps carry only what the server sends;
* payloads travel as their canonical JSON (``openenv.bridge.payloads.PayloadJson``, driven by
  the advertised descriptors); tool-call actions as OpenEnv's ``call_tool`` shape;
  ``list_tools``/``call_tool`` as ``mcp`` frames (``tools/list``, ``tools/call``);
* ``close`` has no reply in OpenEnv's protocol: the session answers ``CloseResponse`` itself
  once the frame is written, and the server's closing of the socket is the end of the
  session (close code 1000 reads as status ``OK``);
* error frames (and JSON-RPC errors) become ``Status`` with the code the frame names
  (``data.status``; else the ``WSErrorCode`` mapped by the error table) and its ``fatal``.

Requests that have no frame (a request with no kind, a second handshake, vectorised
sessions, raw bytes) raise :class:`UnsupportedRequest`: checks that need them declare the
``grpc`` feature and are skipped on this transport.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import ipaddress
import itertools
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import grpc
import httpx
from google.protobuf import json_format

from openenv.bridge import frames
from openenv.bridge.payloads import CALL_TOOL, PayloadJson, info_pool
from openenv.codec import from_struct, to_struct, to_value
from openenv.errors import EnvError
from openenv.tools import ToolResult
from openenv.transport_ws import split_url
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import error_pb2, payload_pb2, tool_pb2
from openenv_conformance.errors import Violation
from openenv_conformance.strategies import NO_JSON, Action
from openenv_conformance.transport import EPISODE_FIELDS, FRAMES
from openenv_conformance.wire import PROTOCOL_VERSION, NoAnswer, RequestBuilder, StreamEnd

__all__ = ["UnsupportedRequest", "WsSession", "WsWire", "parse_info"]

T = TypeVar("T")

#: WebSocket close codes as the status of the session's end.
_CLOSE_CODES = {1000: grpc.StatusCode.OK, 1001: grpc.StatusCode.UNAVAILABLE, 1009: grpc.StatusCode.RESOURCE_EXHAUSTED,
                1011: grpc.StatusCode.INTERNAL, 1006: grpc.StatusCode.UNAVAILABLE}
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
        s = frames.dumps(v)
    except TypeError:
        s = repr(v)
    return s if len(s) <= limit else s[:limit] + "..."


def parse_info(doc: Mapping[str, Any]) -> pb.EnvironmentInfo:
    """An ``EnvironmentInfo`` from its proto3 JSON (``GET /openenv/info``): the advertised
    descriptors are read first, so ``Any`` examples of the environment's own types parse."""
    bare = pb.EnvironmentInfo()
    if isinstance(doc.get("descriptors"), dict):
        json_format.ParseDict(doc["descriptors"], bare.descriptors, ignore_unknown_fields=True)
    info = pb.EnvironmentInfo()
    json_format.ParseDict(dict(doc), info, ignore_unknown_fields=True, descriptor_pool=info_pool(bare))
    return info


def _status(data: Any) -> error_pb2.Status:
    """The ``Status`` of an error frame's ``data``."""
    data = data if isinstance(data, dict) else {}
    out = error_pb2.Status(message=str(data.get("message", "")))
    name = data.get("status")
    mapped = frames.FROM_WS_CODE.get(str(data.get("code", "")))
    if isinstance(name, str) and f"ERROR_CODE_{name}" in error_pb2.ErrorCode.keys():
        out.code = error_pb2.ErrorCode.Value(f"ERROR_CODE_{name}")
    elif mapped is not None:
        out.code = int(mapped[0])
    if "fatal" in data:
        out.fatal = bool(data["fatal"])
    elif mapped is not None:
        out.fatal = mapped[1]
    return out


def _rpc_status(err: Any) -> error_pb2.Status:
    """The ``Status`` of a JSON-RPC error (``data.status`` names the code on openenv servers)."""
    err = err if isinstance(err, dict) else {}
    data = err.get("data")
    if isinstance(data, dict) and isinstance(data.get("status"), str):
        return _status({"message": err.get("message", ""), "status": data["status"], "fatal": False})
    code, message = err.get("code"), str(err.get("message", ""))
    low = message.lower()
    if "does not support mcp" in low:  # OpenEnv's answer for an environment without tools
        name = "UNIMPLEMENTED"
    else:
        name = {-32602: "NOT_FOUND" if ("not found" in low or "unknown tool" in low) else "INVALID_ARGUMENT",
                -32601: "UNIMPLEMENTED", -32000: "RESOURCE_EXHAUSTED"}.get(code, "INTERNAL")  # type: ignore[arg-type]
    return _status({"message": message, "status": name, "fatal": False})


@dataclasses.dataclass
class _Pending:
    """A request written and not yet answered."""

    request_id: int
    kind: str
    frame_id: int | None
    tool: str = ""  # call_tool: the tool's name


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

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.ws_url, self.http_url = split_url(url)
        self.url = url
        self.timeout = timeout
        self.loop = asyncio.new_event_loop()
        self.sessions: list[WsSession] = []
        self.extended: bool | None = None  # an openenv server (GET /openenv/info answers); set by get_info
        self.info: pb.EnvironmentInfo | None = None
        self._http = httpx.Client(timeout=timeout, trust_env=not _loopback(self.http_url))
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
        info = pb.EnvironmentInfo()
        for part in (info.action, info.observation, info.state):
            part.kind = payload_pb2.PAYLOAD_KIND_JSON
        status, md = self.get("/metadata", timeout)
        if status == 200 and isinstance(md, dict):
            info.name = str(md.get("name") or "")
            info.description = str(md.get("description") or "")
            info.version = str(md.get("version") or "")
        status, schema = self.get("/schema", timeout)
        if status == 200 and isinstance(schema, dict):
            for part in ("action", "observation", "state"):
                if isinstance(schema.get(part), dict):
                    try:
                        to_struct(schema[part], getattr(info, part).json_schema)
                    except (TypeError, ValueError):
                        pass
        # Tools: OpenEnv's JSON-RPC tools/list on POST /mcp (an environment without tools
        # answers an error: "Environment does not support MCP").
        t = self.timeout if timeout is None else timeout
        try:
            r = self._http.post(self.http_url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                timeout=t)
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
    """One WebSocket session, with the interface of :class:`openenv_conformance.wire.Session`."""

    def __init__(self, wire: WsWire, channel: _Channel) -> None:
        self.wire = wire
        self.channel = channel
        channel.sessions.append(self)
        self._ids = itertools.count(1)
        self._frame_ids = itertools.count(1)
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._reader: asyncio.Task[None] | None = None
        self._rpc_ids = itertools.count(1)
        self._pj: dict[str, PayloadJson] = {}
        self.ws: Any = None
        self.end: StreamEnd | None = None
        self.opened = False
        self.info: pb.EnvironmentInfo | None = None
        self.session_id = ""
        self.extended = wire.extended is not False

    # -- plumbing

    def _payload(self, part: str) -> PayloadJson:
        pj = self._pj.get(part)
        if pj is None:
            info = self.info or self.wire.info or pb.EnvironmentInfo()
            pj = self._pj[part] = PayloadJson(getattr(info, part), info)
        return pj

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        ws = self.ws
        try:
            async for raw in ws:
                try:
                    self._inbox.put_nowait(frames.loads(raw))
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
    def _end_of(ws: Any) -> StreamEnd:
        code = ws.close_code if ws.close_code is not None else 1006
        reason = ws.close_reason or ""
        return StreamEnd(_CLOSE_CODES.get(code, grpc.StatusCode.UNKNOWN),
                         f"WebSocket closed with code {code}" + (f": {reason}" if reason else ""))

    def _finish(self, end: StreamEnd) -> None:
        self.end = end
        self._inbox.put_nowait(end)

    # -- raw operations

    def next_id(self) -> int:
        return next(self._ids)

    def request(self, request_id: int | None = None, **kind: Any) -> pb.SessionRequest:
        """Build a request with the next id (or ``request_id``)."""
        return pb.SessionRequest(request_id=self.next_id() if request_id is None else request_id, **kind)

    def send(self, request: pb.SessionRequest) -> bool:
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
            raise UnsupportedRequest(f"{kind or 'a request with no kind'} before the handshake: over a WebSocket the "
                                     "connection is the handshake")
        frame, pending = self._frame_of(request)
        return self._write(frame, pending)

    def _next_frame_id(self) -> int | None:
        return next(self._frame_ids) if self.extended else None

    def _write(self, frame: dict[str, Any], pending: _Pending) -> bool:
        from websockets.exceptions import ConnectionClosed

        if pending.frame_id is not None:
            frame["id"] = pending.frame_id
        try:
            self.wire.run(self.ws.send(frames.dumps(frame)), what="a write")
        except ConnectionClosed:
            return False
        self._pending.append(pending)
        return True

    def _connect(self, request: pb.SessionRequest) -> bool:
        from websockets.asyncio.client import connect

        hs = request.handshake
        if hs.num_envs > 1:
            raise UnsupportedRequest("vectorised sessions (num_envs > 1) are gRPC only")
        query = {"client_name": hs.client_name or "openenv-certify"}
        options = from_struct(hs.options) if hs.HasField("options") else {}
        if options:
            query["options"] = frames.dumps(options)
        url = self.wire.ws_url + ("&" if "?" in self.wire.ws_url else "?") + urlencode(query)
        kw: dict[str, Any] = {"open_timeout": self.wire.timeout, "max_size": None, "ping_interval": None,
                              "compression": None, "close_timeout": 2}
        if _loopback(url):
            kw["proxy"] = None

        async def open_socket() -> Any:
            return await connect(url, **kw)

        try:
            self.ws = self.wire.run(open_socket(), self.wire.timeout + 1, "the WebSocket handshake")
        except NoAnswer:
            raise
        except Exception as e:  # noqa: BLE001 - refused, reset, HTTP error: the session never opened
            self._finish(StreamEnd(grpc.StatusCode.UNAVAILABLE, f"cannot open {self.wire.ws_url}: "
                                                                f"{type(e).__name__}: {e}"))
            return False
        self._reader = self.wire.loop.create_task(self._read())
        fid = next(self._frame_ids)
        return self._write({"type": "openenv.hello"}, _Pending(request.request_id, "handshake", fid))

    def _frame_of(self, request: pb.SessionRequest) -> tuple[dict[str, Any], _Pending]:
        kind = request.WhichOneof("kind")
        rid = request.request_id
        if kind == "reset":
            r = request.reset
            data: dict[str, Any] = dict(from_struct(r.options)) if r.HasField("options") else {}
            if r.HasField("seed"):
                data["seed"] = r.seed
            if r.episode_id:
                data["episode_id"] = r.episode_id
            return {"type": "reset", "data": data}, _Pending(rid, kind, self._next_frame_id())
        if kind == "step":
            frame = {"type": "step", "data": self._action_json(request.step.action)}
            if request.step.HasField("timeout"):
                frame["timeout_s"] = self._timeout_s(request.step.timeout)
            return frame, _Pending(rid, kind, self._next_frame_id())
        if kind == "state":
            return {"type": "state"}, _Pending(rid, kind, self._next_frame_id())
        if kind == "list_tools":
            return self._rpc("tools/list", {}), _Pending(rid, kind, self._next_frame_id())
        if kind == "call_tool":
            c = request.call_tool
            frame = self._rpc("tools/call", {"name": c.name, "arguments": from_struct(c.arguments)})
            if c.HasField("timeout"):
                frame["timeout_s"] = self._timeout_s(c.timeout)
            return frame, _Pending(rid, kind, self._next_frame_id(), tool=c.name)
        if kind == "close":
            return {"type": "close"}, _Pending(rid, kind, None)
        raise UnsupportedRequest(f"{kind or 'a request with no kind'} has no OpenEnv frame")

    def _timeout_s(self, d: Any) -> float:
        if not self.extended:
            raise UnsupportedRequest("stock OpenEnv frames have no per-request timeout")
        return d.ToNanoseconds() / 1e9

    def _rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"type": "mcp", "data": {"jsonrpc": "2.0", "id": next(self._rpc_ids), "method": method,
                                        "params": params}}

    def _action_json(self, p: payload_pb2.Payload) -> Any:
        """A step action's ``data``: canonical JSON; a tool call in OpenEnv's ``call_tool`` shape."""
        if p.WhichOneof("kind") == "message" and p.message.type_url.rsplit("/", 1)[-1] == CALL_TOOL:
            req = tool_pb2.CallToolRequest()
            p.message.Unpack(req)
            return {"type": "call_tool", "tool_name": req.name, "arguments": from_struct(req.arguments)}
        return self._payload("action").to_json(p)

    def recv(self, timeout: float | None = None) -> pb.SessionResponse | StreamEnd:
        """The answer to the oldest unanswered request, or the :class:`StreamEnd` (sticky)
        once the socket is closed. A frame nobody asked for is returned as it comes."""
        if self._pending and self._pending[0].kind == "close":
            p = self._pending.popleft()
            return pb.SessionResponse(request_id=p.request_id, close=pb.CloseResponse())
        item = self.wire.run(self._inbox.get(), timeout, what="a request on the session")
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

    def exchange(self, request: pb.SessionRequest, timeout: float | None = None) -> pb.SessionResponse | StreamEnd:
        """Send ``request`` and read one answer (or the end of the session)."""
        if not self.send(request):
            return self.recv(timeout) if self.end is None else self.end
        return self.recv(timeout)

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

    def __enter__(self) -> WsSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # -- translation of replies

    def _unsolicited(self, frame: Any) -> pb.SessionResponse:
        if isinstance(frame, dict) and frame.get("type") == "error":
            return pb.SessionResponse(error=_status(frame.get("data")))
        return pb.SessionResponse()  # described as "an answer with no kind set"

    def _answer(self, p: _Pending, frame: Any) -> pb.SessionResponse:
        if not isinstance(frame, dict):
            raise Violation(f"the reply to {p.kind} is not a JSON object: {_compact(frame)}")
        typ, data, fid = frame.get("type"), frame.get("data"), frame.get("id")
        if self.extended and p.frame_id is not None:
            if fid is not None and fid != p.frame_id:
                raise Violation(f"the reply to frame id {p.frame_id} ({p.kind}) carries id {fid!r}: replies must come "
                                "in request order under their frame's id")
            if fid is None and typ != "error":
                raise Violation(f"the {typ!r} reply to frame id {p.frame_id} ({p.kind}) does not echo its id")
        resp = pb.SessionResponse(request_id=p.request_id)
        if p.kind == "handshake":
            return self._handshake_answer(resp, typ, data)
        if typ == "error":
            resp.error.CopyFrom(_status(data))
            return resp
        if not isinstance(data, dict):
            raise Violation(f"the {typ!r} reply to {p.kind} has no data object: {_compact(frame)}")
        if p.kind in ("reset", "step"):
            if typ != "observation":
                raise Violation(f"a {typ!r} frame answered {p.kind} (expected an observation frame)")
            self._time_step(data, getattr(resp, p.kind).time_step)
        elif p.kind == "state":
            if typ != "state":
                raise Violation(f"a {typ!r} frame answered state (expected a state frame)")
            self._state(data, resp.state)
        elif p.kind in ("list_tools", "call_tool"):
            if typ != "mcp":
                raise Violation(f"a {typ!r} frame answered an mcp frame ({p.kind})")
            if data.get("error") is not None:
                resp.error.CopyFrom(_rpc_status(data["error"]))
            elif p.kind == "list_tools":
                self._tools(data.get("result"), resp.list_tools)
            else:
                self._tool_result(data.get("result"), p.tool, resp.call_tool)
        return resp

    def _handshake_answer(self, resp: pb.SessionResponse, typ: Any, data: Any) -> pb.SessionResponse:
        if typ == "openenv.hello" and isinstance(data, dict):
            info = pb.EnvironmentInfo()
            try:
                info.ParseFromString(base64.b64decode(data.get("info_b64") or ""))
            except Exception as e:  # noqa: BLE001 - base64 or protobuf decoding
                raise Violation(f"openenv.hello: info_b64 is not an EnvironmentInfo: {e}") from None
            hs = resp.handshake
            hs.session_id = str(data.get("session_id") or "")
            hs.protocol_version = str(data.get("protocol_version") or "")
            hs.info.CopyFrom(info)
            self.extended = True
        elif typ == "error" and isinstance(data, dict) and data.get("code") in ("UNKNOWN_TYPE", "VALIDATION_ERROR") \
                and not data.get("fatal"):
            # a stock OpenEnv server: it does not know openenv.hello, the session is open
            self.extended = False
            resp.handshake.protocol_version = PROTOCOL_VERSION
            resp.handshake.info.CopyFrom(self.wire.info or pb.EnvironmentInfo())
        elif typ == "error":
            resp.error.CopyFrom(_status(data))
            return resp
        else:
            raise Violation(f"the first reply on /ws is a {typ!r} frame, neither openenv.hello nor an error")
        self.opened = True
        self.info = resp.handshake.info
        self.session_id = resp.handshake.session_id
        self._pj.clear()
        return resp

    def _time_step(self, data: dict[str, Any], ts: pb.TimeStep) -> None:
        body = data.get("observation")
        meta = data.get("metadata")
        if not self.extended and isinstance(body, dict) and "metadata" in body:
            body = {k: v for k, v in body.items() if k != "metadata"}
            meta = meta or data["observation"]["metadata"]
        reward = data.get("reward")
        if reward is not None:
            if isinstance(reward, bool) or not isinstance(reward, (int, float)):
                raise Violation(f"reward {reward!r} is not a number")
            ts.reward = float(reward)
        done = data.get("done")
        if self.extended:
            terminated, truncated = data.get("terminated", False), data.get("truncated", False)
            if not isinstance(terminated, bool) or not isinstance(truncated, bool):
                raise Violation(f"terminated {terminated!r} / truncated {truncated!r} are not booleans")
            if done is not None and bool(done) != (terminated or truncated):
                raise Violation(f"done={done!r} but terminated={terminated}, truncated={truncated}: done must be "
                                "terminated or truncated")
            eid, count = data.get("episode_id", ""), data.get("step_count", 0)
            if not isinstance(eid, str) or isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise Violation(f"episode_id {eid!r} / step_count {count!r}: expected a string and an integer >= 0")
            ts.episode_id, ts.step_count = eid, count
        else:
            terminated, truncated = bool(data.get("terminated", done)), bool(data.get("truncated", False))
        ts.terminated, ts.truncated = terminated, truncated
        if data.get("reward_breakdown") is not None:
            try:
                json_format.ParseDict(data["reward_breakdown"], ts.reward_breakdown, ignore_unknown_fields=True)
            except (json_format.ParseError, TypeError, ValueError) as e:
                raise Violation(f"reward_breakdown is not a RubricScore: {e}") from None
        if isinstance(meta, dict) and meta:
            to_struct(meta, ts.metadata)
        if body is not None:
            self._decode("observation", body, ts.observation)

    def _decode(self, part: str, value: Any, out: payload_pb2.Payload) -> None:
        try:
            self._payload(part).from_json(value, out)
        except (EnvError, TypeError, ValueError) as e:
            raise Violation(f"the {part} {_compact(value)} does not fit the declared {part} type: {e}") from None

    def _state(self, data: dict[str, Any], out: pb.StateResponse) -> None:
        eid, count, status = data.get("episode_id"), data.get("step_count", 0), data.get("status")
        out.episode_id = "" if eid is None else str(eid)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise Violation(f"state step_count {count!r} is not an integer >= 0")
        out.step_count = count
        if isinstance(status, str) and status in _STATUS_NAMES:
            out.status = _STATUS_NAMES[status]
        elif self.extended:
            raise Violation(f"state status {status!r} is not an EpisodeStatus name")
        if self.extended:
            if data.get("state") is not None:
                self._decode("state", data["state"], out.state)
            return
        rest = {k: v for k, v in data.items() if k not in ("episode_id", "step_count", "status")}
        if rest:
            to_value(rest, out.state.json)

    @staticmethod
    def _tools(result: Any, out: tool_pb2.ListToolsResponse) -> None:
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            raise Violation(f"tools/list result has no tools list: {_compact(result)}")
        for t in result["tools"]:
            if not isinstance(t, dict):
                raise Violation(f"tools/list lists a non-object: {_compact(t)}")
            pt = out.tools.add(name=str(t.get("name", "")), description=str(t.get("description") or ""))
            schema = t.get("inputSchema", t.get("input_schema"))
            if isinstance(schema, dict):
                to_struct(schema, pt.input_schema)
            osch = t.get("outputSchema", t.get("output_schema"))
            if isinstance(osch, dict):
                to_struct(osch, pt.output_schema)

    @staticmethod
    def _tool_result(result: Any, name: str, out: tool_pb2.CallToolResponse) -> None:
        if not isinstance(result, dict):
            raise Violation(f"tools/call result is not an object: {_compact(result)}")
        out.name = name
        content = [{k: v for k, v in c.items() if v is not None and k not in ("annotations", "meta", "_meta")}
                   for c in result.get("content") or [] if isinstance(c, dict)]
        sc = result.get("structuredContent", result.get("structured_content"))
        if sc is not None and not isinstance(sc, dict):
            raise Violation(f"tools/call structuredContent is not an object: {_compact(sc)}")
        ToolResult(content, sc, bool(result.get("isError", result.get("is_error", False)))).to_proto(out.result)

    # -- requests

    def handshake(self, protocol_version: str = PROTOCOL_VERSION, *, options: Mapping[str, Any] | None = None,
                  client_name: str = "openenv-certify", request_id: int | None = None, num_envs: int = 0,
                  autoreset_mode: int = 0) -> pb.SessionResponse | StreamEnd:
        """Connect to ``/ws`` (options and client name in the query) and say hello. There
        is no version negotiation over WebSocket: ``protocol_version`` is not sent."""
        hs = pb.HandshakeRequest(protocol_version=protocol_version, client_name=client_name, num_envs=num_envs,
                                 autoreset_mode=autoreset_mode)
        if options:
            to_struct(dict(options), hs.options)
        return self.exchange(self.request(request_id, handshake=hs))

    def step(self, action: Any, timeout_s: float | None = None) -> pb.SessionResponse | StreamEnd:
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
        if not self._write(frame, _Pending(self.next_id(), "step", self._next_frame_id())):
            return self.recv() if self.end is None else self.end
        return self.recv()

    def state(self, env_id: int | None = None) -> pb.SessionResponse | StreamEnd:
        if env_id:
            raise UnsupportedRequest("state(env_id) addresses vectorised sessions, which are gRPC only")
        return super().state()

    def frame(self, frame: dict[str, Any]) -> pb.SessionResponse | StreamEnd:
        """Send any frame (with the session's correlation id) and translate its reply as an
        error or an answer with no kind (for requests only this protocol has)."""
        if self.ws is None:
            raise UnsupportedRequest("a frame before the handshake")
        if not self._write(dict(frame), _Pending(self.next_id(), "raw", self._next_frame_id())):
            return self.recv() if self.end is None else self.end
        return self.recv()
